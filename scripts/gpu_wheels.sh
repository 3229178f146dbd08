#!/usr/bin/env bash
# .whl/: the Python packages the GPU machine's image lacks for `python3 -m multilab` (mlflow and
# its dependencies, nltk, textblob), as manylinux wheels for its Python 3.12, to carry with a
# lease (docs/GPU.md). The image has torch, transformers, numpy, pandas, scipy, scikit-learn,
# matplotlib, yaml, requests and the like; this list is what it lacked when its package list was
# last read (2026-11-17): 47 wheels, ≈ 37 MB. Installed there by gpu_lease.sh run.
#   bash scripts/gpu_wheels.sh
set -euo pipefail
PYTHON="${PYTHON:-.venv/bin/python}"
lacking="alembic annotated-types blinker cachetools cffi cryptography databricks-sdk defusedxml
docker fastapi flask flask-cors gitdb gitpython google-auth graphene graphql-core graphql-relay
gunicorn huey importlib-metadata itsdangerous mako mlflow mlflow-skinny mlflow-tracing nltk
opentelemetry-api opentelemetry-proto opentelemetry-sdk opentelemetry-semantic-conventions
prettytable pyasn1 pyasn1-modules pycparser pydantic pydantic-core python-dotenv skops smmap
sqlalchemy sqlparse starlette textblob typing-inspection uvicorn wcwidth"
scratch=$(mktemp -d) && trap 'rm -rf "$scratch"' EXIT
"$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$scratch" \
  mlflow==3.17.2 textblob==0.20.1 nltk==3.10.4
rm -rf .whl && mkdir .whl
for wheel in "$scratch"/*.whl; do
  name=$(basename "$wheel" | cut -d- -f1 | tr '_.' '--' | tr '[:upper:]' '[:lower:]')
  case " $(echo $lacking) " in *" $name "*) cp "$wheel" .whl/ ;; esac
done
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >> .git/info/exclude; }
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/"
