# syntax=docker/dockerfile:1
#
# multilab for a GPU server: the developer set-up (scripts/setup.sh, as in the README) with a
# CUDA build of torch 2.13.0. docs/GPU.md has the whole procedure; in short:
#
#   docker build -t multilab-gpu --build-arg USER_UID="$(id -u)" --build-arg USER_GID="$(id -g)" .
#   docker run --rm --init --gpus all --ipc host \
#     -v "$PWD":/home/multilab/project \
#     multilab-gpu                      # = dvc repro (CMD), in the bind-mounted clone
#
# The project directory of the image is a complete, working copy of the build context (git
# history included, data/ exported, the DVC cache filled), so the image also runs on its own.
# On a server, bind-mount a git clone over it instead: then data/, the DVC cache, artifacts/,
# mlruns/, reports/, dvc.lock and the queued experiments (git refs) all stay on the host, and
# the code that runs is the clone's (the editable install points at the same path). For that
# reason the virtualenv lives outside the project, in /home/multilab/venv, and there is no
# VOLUME instruction: a declared volume would hide the clone's data/ or mlruns/ behind an
# anonymous volume. Mount what you need with -v (docs/GPU.md), or point MLFLOW_TRACKING_URI at
# a tracking server.
#
# Base image: Python 3.11 (pyproject: >=3.11,<3.12) on Debian 12, whose g++ builds fasttext
# 0.9.3 (an sdist only). Not an nvidia/cuda image: torch's wheels carry the CUDA runtime,
# cuBLAS, cuDNN and NCCL as pip packages (nvidia-*), so the image needs nothing from CUDA but
# the host's driver, which `docker run --gpus` (NVIDIA Container Toolkit) mounts in.
# Pinned by tag; append @sha256:<digest> (docker buildx imagetools inspect <tag>) to make
# rebuilds byte-identical.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: virtualenv, package, data (everything scripts/setup.sh does) ------------------
FROM ${PYTHON_IMAGE} AS build

# Which torch 2.13.0 build. Empty (the default): pip's configured index, which in this image
# is PyPI's default index, whose Linux wheel is the CUDA 13.0 build (it depends on the
# nvidia-*-cu13 wheels; checked with `pip install --dry-run --report`): NVIDIA driver >= 580,
# GPUs of compute capability >= 7.5 (Turing and newer). For an older driver or a V100, pass
# a CUDA 12 index of the PyTorch download server (its whl/cu126 path; pytorch.org's install
# selector gives the address; check first that it carries torch 2.13.0); its whl/cpu index
# gives a CPU-only image. setup.sh installs torch first from that index only; its later
# `pip install -e .` (from pip's configured index) keeps it, since a local version such as
# 2.13.0+cu126 satisfies the pin torch==2.13.0 (PEP 440 ignores the +label).
ARG TORCH_INDEX_URL=""
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

# The README's set-up command, unchanged; TORCH_INDEX_URL selects the torch build and
# MULTILAB_VENV the place of the virtualenv. Its `dvc add data` only stages data.dvc (git add,
# no commit), so no git identity is needed here. Then fail the build, not the first training
# run, if torch is not a CUDA build, and create the directories that setup.sh does not (a
# directory that a named volume is mounted on and that is missing from the image belongs to
# root, and the pipeline could not write to it).
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MULTILAB_VENV=/home/multilab/venv
RUN TORCH_INDEX_URL="${TORCH_INDEX_URL}" bash scripts/setup.sh \
    && "${MULTILAB_VENV}/bin/python" -c "import os, torch; cuda = torch.version.cuda; \
print('torch', torch.__version__, 'CUDA', cuda); \
assert cuda or os.environ['TORCH_INDEX_URL'].rstrip('/').endswith('/cpu'), 'not a CUDA build'" \
    && mkdir -p artifacts mlruns reports .dvc/cache

# ---- runtime: the same directories, without the compiler ---------------------------------
FROM ${PYTHON_IMAGE}

ARG TORCH_INDEX_URL=""
ARG USER_UID=1000
ARG USER_GID=1000
# procps: `ps`, which scripts/lanes.sh uses to find its lanes' processes; g++: torch.compile's
# C++ compiler, which `train.step = fused` needs (without it the image's fused runs stop)
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git procps g++ \
    && rm -rf /var/lib/apt/lists/*
# git identity and safe.directory system-wide, so that they hold for any --user and for a
# clone mounted from the host: `dvc exp run` commits experiments to the repository. A clone's
# own user.name / user.email (.git/config) take precedence.
RUN groupadd --gid "${USER_GID}" multilab \
    && useradd --uid "${USER_UID}" --gid "${USER_GID}" --create-home multilab \
    && git config --system --add safe.directory /home/multilab/project \
    && git config --system user.name multilab \
    && git config --system user.email multilab@localhost

# Same paths as in the build stage: the virtualenv's scripts (shebangs), its python link to
# /usr/local/bin and the editable install of multilab are absolute paths.
COPY --from=build --chown=${USER_UID}:${USER_GID} /home/multilab/venv /home/multilab/venv
COPY --from=build --chown=${USER_UID}:${USER_GID} /home/multilab/project /home/multilab/project
USER ${USER_UID}:${USER_GID}
WORKDIR /home/multilab/project

# dvc, mlflow, multilab and accelerate from the virtualenv; TORCH_INDEX_URL and MULTILAB_VENV
# kept, so that `bash scripts/setup.sh` in a mounted clone keeps this torch and this venv.
# NVIDIA_DRIVER_CAPABILITIES: the driver's CUDA library and nvidia-smi (which multilab uses to
# give each queue worker its own GPU, src/multilab/devices.py); unset, the toolkit may mount
# only the utilities. MLFLOW_TRACKING_URI: the tracking server, e.g. `-e
# MLFLOW_TRACKING_URI=http://mlflow:5000`; empty = the SQLite store in mlruns/ (multilab and
# MLflow treat "" as unset).
ENV PATH="/home/multilab/venv/bin:${PATH}" \
    MULTILAB_VENV=/home/multilab/venv \
    TORCH_INDEX_URL=${TORCH_INDEX_URL} \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONUNBUFFERED=1 \
    MLFLOW_TRACKING_URI=""

CMD ["dvc", "repro"]
