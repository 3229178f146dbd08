#!/usr/bin/env bash
# Lint the GPU image without a Docker engine: hadolint (from the dev extras) on the
# Dockerfile, and a check that the image runs the README's own set-up and main commands, so
# that CI, which runs those commands, exercises what the image does.
set -euo pipefail
cd "$(dirname "$0")/.."
HADOLINT=${HADOLINT:-.venv/bin/hadolint}
"$HADOLINT" --failure-threshold warning Dockerfile
grep -q 'bash scripts/setup.sh' README.md || { echo "README lost its set-up command" >&2; exit 1; }
grep -q 'bash scripts/setup.sh' Dockerfile || { echo "Dockerfile does not run scripts/setup.sh" >&2; exit 1; }
grep -q '^CMD \["dvc", "repro"\]' Dockerfile || { echo "Dockerfile CMD is not dvc repro" >&2; exit 1; }
echo "Dockerfile: hadolint clean; set-up and CMD match the README"
