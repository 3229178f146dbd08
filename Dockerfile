# syntax=docker/dockerfile:1
#
# multilab for a GPU server: the developer set-up (scripts/setup.sh, as in the README) with a
# CUDA build of torch 2.13.0. Build from a clean checkout; the build context keeps .git (see
# .dockerignore): DVC needs the repository, and MLflow runs are tagged with its commit.
#
#   docker build -t multilab-gpu .
#   docker run --rm --gpus all \
#     -v multilab-data:/home/multilab/project/data \
#     -v multilab-dvc-cache:/home/multilab/project/.dvc/cache \
#     -v multilab-mlruns:/home/multilab/project/mlruns \
#     -v multilab-artifacts:/home/multilab/project/artifacts \
#     multilab-gpu                      # = dvc repro (CMD); docs/GPU.md has the whole procedure
#
# Base image: Python 3.11 (pyproject: >=3.11,<3.12) on Debian 12, the Debian of the
# development machines, whose g++ builds fasttext 0.9.3 (an sdist only). Not an nvidia/cuda
# image: the torch wheels of the PyTorch index carry the CUDA runtime, cuBLAS, cuDNN and NCCL
# as pip packages (nvidia-*), so the image needs nothing from CUDA but the host's driver,
# which `docker run --gpus` (NVIDIA Container Toolkit) mounts in; nvidia/cuda runtime images
# bring another Python (3.12 on Ubuntu 24.04) and a second, unused copy of CUDA.
# Pinned by tag; append @sha256:<digest> (docker buildx imagetools inspect <tag>) to make
# rebuilds byte-identical.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: virtualenv, package, data (everything scripts/setup.sh does) ------------------
FROM ${PYTHON_IMAGE} AS build

# Which torch 2.13.0 build: cu128 = CUDA 12.8, the CUDA 12 line that also covers Blackwell
# GPUs; it needs an NVIDIA driver >= 570 (older R525+ drivers run it through CUDA minor-version
# compatibility). For an older driver use .../whl/cu126; for a CPU-only image .../whl/cpu.
# Check the PyTorch install matrix that the index has torch 2.13.0 for that CUDA version.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG USER_UID=1000
ARG USER_GID=1000

# git: DVC and setup.sh; g++: builds fasttext. Debian package versions are not pinned
# (DL3008): the archive drops superseded versions, so a pin breaks the build at the next
# security update; the base image tag pins the distribution.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git g++ \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --gid "${USER_GID}" multilab \
    && useradd --uid "${USER_UID}" --gid "${USER_GID}" --create-home multilab
USER ${USER_UID}:${USER_GID}
WORKDIR /home/multilab/project
COPY --chown=${USER_UID}:${USER_GID} . .

# The README's set-up command, unchanged; TORCH_INDEX_URL selects the CUDA wheel of torch.
# Then fail the build, not the first training run, if the index gave a CPU-only torch, and
# create the volume directories that setup.sh does not (a volume mounted on a directory
# missing from the image belongs to root, and the pipeline could not write to it).
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN TORCH_INDEX_URL="${TORCH_INDEX_URL}" bash scripts/setup.sh \
    && .venv/bin/python -c "import os, torch; cuda = torch.version.cuda; \
print('torch', torch.__version__, 'CUDA', cuda); \
assert cuda or '/cu' not in os.environ['TORCH_INDEX_URL'], 'torch is not a CUDA build'" \
    && mkdir -p artifacts mlruns .dvc/cache

# ---- runtime: the same project directory, without the compiler --------------------------
FROM ${PYTHON_IMAGE}

ARG USER_UID=1000
ARG USER_GID=1000
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
# git identity and safe.directory system-wide, so that they hold for any --user too: `dvc exp
# run` commits experiments to the repository.
RUN groupadd --gid "${USER_GID}" multilab \
    && useradd --uid "${USER_UID}" --gid "${USER_GID}" --create-home multilab \
    && git config --system --add safe.directory /home/multilab/project \
    && git config --system user.name multilab \
    && git config --system user.email multilab@localhost

# Same path as in the build stage: the virtualenv's scripts and the editable install of
# multilab refer to it by absolute path.
COPY --from=build --chown=${USER_UID}:${USER_GID} /home/multilab/project /home/multilab/project
USER ${USER_UID}:${USER_GID}
WORKDIR /home/multilab/project

# dvc, mlflow, multilab and accelerate from the project's virtualenv.
ENV PATH="/home/multilab/project/.venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1
# Optional: the MLflow tracking server, e.g. `docker run -e MLFLOW_TRACKING_URI=http://mlflow:5000`.
# Empty = the SQLite store in mlruns/ (a volume below); multilab and MLflow treat "" as unset.
ENV MLFLOW_TRACKING_URI=""

# Named volumes start as copies of the image's directories: data/ (exported by setup.sh) and
# the DVC cache (which holds data/ once more, as data.dvc records it). A bind mount of an
# empty host directory hides them instead; see docs/GPU.md.
VOLUME ["/home/multilab/project/data", \
        "/home/multilab/project/.dvc/cache", \
        "/home/multilab/project/mlruns", \
        "/home/multilab/project/artifacts"]

CMD ["dvc", "repro"]
