#!/usr/bin/env bash
# Build the GPU server's image (the Dockerfile) from a fresh clone of HEAD, then check it by
# running inside it: `multilab --help`, the default study on the smoke profile, the fast tests.
#
#   bash scripts/build_image.sh                       # torch: CUDA where nvidia-smi runs, else CPU
#   bash scripts/build_image.sh --torch cpu --checks help,smoke --out /tmp/image-check
#
# Engine: `docker build` where a Docker daemon answers, else buildah (Debian's `buildah`
# package; chroot isolation, so it runs without a daemon, as root). Without Docker the base
# image is made here, not pulled: Debian 12 (debootstrap --variant=minbase) with python3.11,
# pip and venv, from the mirror this machine's apt sources already use, kept as a local image
# and reused. The CUDA build passes no build argument but the user's ids: the Dockerfile's
# defaults are the GPU server's. The CPU build installs torch 2.13.0 from TORCH_INDEX_URL
# when it is set (the PyTorch download server's whl/cpu index), else from a throwaway index
# served on 127.0.0.1 during the build with the wheels this machine's pip resolves (its own
# configuration decides where from), so it needs neither a GPU nor the CUDA wheels.
# Everything else the build installs comes from pip's default configuration in the image.
# Only committed files are built: uncommitted changes are not in the image.
set -euo pipefail
{ # read whole before it runs: editing the file during a build does not change the build
cd "$(dirname "$0")/.."
REPO=$PWD

usage() {
  cat <<'EOF'
usage: scripts/build_image.sh [--torch cuda|cpu] [--engine docker|buildah] [--tag NAME]
                              [--checks LIST] [--out DIR] [--rebuild-base] [--no-build]
  --torch         torch build in the image (default: cuda where nvidia-smi runs, else cpu)
  --engine        docker or buildah (default: docker where its daemon answers, else buildah)
  --tag           image name (default: multilab-gpu for cuda, multilab-cpu for cpu)
  --checks        comma-separated, run inside the built image: help, smoke, tests, or none
                  (default: help,smoke,tests)
  --out           where the smoke study's report is copied (default: a new temporary folder)
  --rebuild-base  make the Debian base image again (buildah only; it is reused otherwise)
  --no-build      only run the checks, on the image --tag names (built before)
EOF
}

bad() { echo "build_image.sh: $1 (--help lists the options)" >&2; exit 2; }

TORCH="" ENGINE="" TAG="" CHECKS="help,smoke,tests" OUT="" REBUILD_BASE=0 BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) case "${2:-}" in ""|-*) bad "--torch needs a value";; esac; TORCH=$2; shift 2 ;;
    --engine) case "${2:-}" in ""|-*) bad "--engine needs a value";; esac; ENGINE=$2; shift 2 ;;
    --tag) case "${2:-}" in ""|-*) bad "--tag needs a value";; esac; TAG=$2; shift 2 ;;
    --checks) case "${2:-}" in ""|-*) bad "--checks needs a value";; esac; CHECKS=$2; shift 2 ;;
    --out) case "${2:-}" in ""|-*) bad "--out needs a value";; esac; OUT=$2; shift 2 ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) bad "unknown argument '$1'" ;;
  esac
done

if [ -z "$TORCH" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then TORCH=cuda
  else TORCH=cpu; fi
fi
case "$TORCH" in cuda|cpu) ;; *) bad "bad --torch '$TORCH' (valid: cuda, cpu)" ;; esac
for check in ${CHECKS//,/ }; do
  case "$check" in help|smoke|tests|none) ;;
    *) bad "bad check '$check' in --checks (valid: help, smoke, tests, none)" ;; esac
done
if [ -n "$OUT" ]; then  # checked before anything is made (mkdir's own error, exit 1, came
  # after the work folder was, and left it)
  out_base=$OUT
  while [ ! -e "$out_base" ] && [ ! -L "$out_base" ]; do out_base=$(dirname -- "$out_base"); done
  [ -d "$out_base" ] && [ -w "$out_base" ] \
    || bad "--out '$OUT': not a folder it can make ('$out_base' is no writable folder)"
fi
if [ -z "$ENGINE" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then ENGINE=docker
  elif command -v buildah >/dev/null 2>&1; then ENGINE=buildah
  else
    echo "build_image.sh: neither a Docker daemon nor buildah here (apt-get install buildah)" >&2
    exit 2
  fi
fi
case "$ENGINE" in docker|buildah) ;; *) bad "bad --engine '$ENGINE' (valid: docker, buildah)" ;; esac
# an engine named but not here: the build's log said so after the clone (exit 1)
if [ "$ENGINE" = docker ] && ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
  bad "--engine docker: no Docker daemon answers here (docker info fails); start it, or --engine buildah"
fi
if [ "$ENGINE" = buildah ] && ! command -v buildah >/dev/null 2>&1; then
  bad "--engine buildah: buildah is not installed (apt-get install buildah)"
fi
TAG=${TAG:-multilab-$([ "$TORCH" = cuda ] && echo gpu || echo cpu)}
BASE_IMAGE=localhost/multilab-base:bookworm-python3.11
WORK=$(mktemp -d "${TMPDIR:-/tmp}/multilab-image.XXXXXX")
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
INDEX_PID=""
cleanup() {
  [ -z "$INDEX_PID" ] || kill "$INDEX_PID" 2>/dev/null || true
  rm -rf "$WORK/context" "$WORK/rootfs" "$WORK/index"
  rmdir "$WORK/out" 2>/dev/null || true  # a run that stopped before writing anything
  rmdir "$WORK" 2>/dev/null || true
}
trap cleanup EXIT
echo "engine: $ENGINE; torch: $TORCH; image: $TAG"

# ---- the base (buildah): Debian 12 minbase + python3.11, made once -----------------------
apt_mirror() {
  # the first Debian archive of this machine's apt sources that serves bookworm itself
  # (one-line .list or deb822 .sources), or DEBIAN_MIRROR when set
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  python3 - /etc/apt/sources.list /etc/apt/sources.list.d/* <<'PY'
import re, sys
for name in sys.argv[1:]:
    try:
        text = open(name, encoding="utf-8").read()
    except OSError:
        continue
    for line in text.splitlines():  # one-line style: deb [opts] URI SUITE COMPONENTS
        m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", line)
        if m:
            print(m.group(1)); sys.exit(0)
    for stanza in re.split(r"\n\s*\n", text):  # deb822 style
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
        if "bookworm" in fields.get("Suites", "").split() and fields.get("URIs"):
            print(fields["URIs"].split()[0]); sys.exit(0)
sys.exit("no apt source for bookworm in /etc/apt: set DEBIAN_MIRROR")
PY
}

make_base() {
  local mirror root ctr mnt
  mirror=$(apt_mirror)
  command -v debootstrap >/dev/null || { echo "build_image.sh: apt-get install debootstrap" >&2; exit 2; }
  root=$WORK/rootfs
  echo "base: debootstrap minbase bookworm from this machine's apt mirror"
  local base_start=$SECONDS
  debootstrap --variant=minbase \
    --include=ca-certificates,passwd,python3.11,python3.11-venv,python3.11-dev,python3-pip \
    bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
  # the host's own bookworm sources (updates, security) when it is bookworm too
  if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
    cp /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
      "$root/etc/apt/sources.list.d/" 2>/dev/null || true
    if [ -s /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$root/etc/apt/"
    elif ls "$root"/etc/apt/sources.list.d/* >/dev/null 2>&1; then rm -f "$root/etc/apt/sources.list"; fi
  fi
  # the certificate authorities this machine adds to Debian's (an intercepting proxy's, a
  # company's): the build's pip reaches its index through the same network as the host's
  local extra_cas=0
  if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
    extra_cas=1
  fi
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$root"/. "$mnt"/
  buildah umount "$ctr" >/dev/null
  buildah config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    $([ "$extra_cas" = 0 ] || echo --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt) \
    --cmd python3.11 --label org.opencontainers.image.description="Debian 12 minbase, python3.11" \
    "$ctr"
  buildah run --isolation chroot "$ctr" -- sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*'
  buildah commit -q --rm "$ctr" "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
  BASE_BUILD_S=$((SECONDS - base_start))
  echo "base: made $BASE_IMAGE in $(((SECONDS - base_start) / 60)) min $(((SECONDS - base_start) % 60)) s"
}

# the image's user takes the caller's ids (files written to a mounted clone stay theirs);
# root's ids would collide with the image's root, so root builds keep the defaults (1000)
BASE_BUILD_S=""   # set when the base is made by this run
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
BUILD_ARGS=()
[ "$(id -u)" = 0 ] || BUILD_ARGS=(--build-arg "USER_UID=$(id -u)" --build-arg "USER_GID=$(id -g)")
if [ "$ENGINE" = buildah ] && [ "$BUILD" = 1 ]; then
  if [ "$REBUILD_BASE" = 1 ] || ! buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { echo "build_image.sh: making the base needs root (debootstrap)" >&2; exit 2; }
    make_base
  else
    echo "base: $BASE_IMAGE (cached; --rebuild-base makes it again)"
  fi
  BUILD_ARGS+=(--build-arg "PYTHON_IMAGE=$BASE_IMAGE")
fi

# ---- CPU torch: TORCH_INDEX_URL, or this machine's wheels on a throwaway local index -------
NETWORK_ARGS=()
if [ "$TORCH" = cpu ] && [ "$BUILD" = 1 ]; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    TORCH_URL=$TORCH_INDEX_URL
  else
    echo "torch: this machine's pip resolves torch==2.13.0 (served on 127.0.0.1 for the build)"
    python3 -m pip download -q torch==2.13.0 --only-binary :all: \
      --platform manylinux_2_28_x86_64 --python-version 3.11 -d "$WORK/wheels" 2>&1 | { grep -v "is ignored: it is neither" || true; } >&2
    ls "$WORK"/wheels/torch-2.13.0+cpu-* >/dev/null 2>&1 || {
      echo "build_image.sh: this machine's pip gives no CPU build of torch 2.13.0; set TORCH_INDEX_URL to the PyTorch download server's whl/cpu index" >&2
      exit 2; }
    python3 - "$WORK/wheels" "$WORK/index/cpu" <<'PY'
"""A PEP 503 simple index: one folder per normalised project name, one link per file."""
import re, shutil, sys
from pathlib import Path
wheels, index = Path(sys.argv[1]), Path(sys.argv[2])
for wheel in sorted(wheels.iterdir()):
    project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    folder = index / project
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, folder / wheel.name)
for folder in index.iterdir():
    links = "".join(f'<a href="{f.name.replace("+", "%2B")}">{f.name}</a>\n'
                    for f in sorted(folder.iterdir()) if f.name != "index.html")
    (folder / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
PY
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 -m http.server --bind 127.0.0.1 --directory "$WORK/index" "$PORT" >"$WORK/index.log" 2>&1 &
    INDEX_PID=$!
    TORCH_URL=http://127.0.0.1:$PORT/cpu/
    NETWORK_ARGS=(--network host)   # the build's pip reaches the index on the host's loopback
  fi
  case "${TORCH_URL%/}" in */cpu) ;; *) bad "TORCH_INDEX_URL must end in /cpu for --torch cpu" ;; esac
  BUILD_ARGS+=(--build-arg "TORCH_INDEX_URL=$TORCH_URL")
fi

# ---- the build, from a fresh clone of HEAD ---------------------------------------------------
build_s=None size=""   # None: the record says no build ran
COMMIT="$(git -C "$REPO" rev-parse HEAD)"  # read once: the checkout may move on while it builds
if [ "$BUILD" = 1 ]; then
  git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo "note: uncommitted changes are not in the image" >&2
  git clone -q --no-hardlinks "$REPO" "$WORK/context"
  git -C "$WORK/context" checkout -q --detach "$COMMIT"
  git -C "$WORK/context" remote remove origin
  echo "building $TAG from ${COMMIT:0:7} (log: $WORK/build.log)"
  start=$SECONDS
  if [ "$ENGINE" = docker ]; then
    docker build ${NETWORK_ARGS[@]+"${NETWORK_ARGS[@]}"} ${BUILD_ARGS[@]+"${BUILD_ARGS[@]}"} -t "$TAG" "$WORK/context" >"$WORK/build.log" 2>&1 \
      || { tail -40 "$WORK/build.log" >&2; exit 1; }
    size=$(docker image ls --format '{{.Size}}' "$TAG" | head -1)
  else
    nice -n 10 buildah bud --isolation chroot --layers ${NETWORK_ARGS[@]+"${NETWORK_ARGS[@]}"} \
      ${BUILD_ARGS[@]+"${BUILD_ARGS[@]}"} \
      -t "$TAG" "$WORK/context" >"$WORK/build.log" 2>&1 \
      || { tail -40 "$WORK/build.log" >&2; exit 1; }
    size=$(buildah images --noheading --format '{{.Size}}' "$TAG" | head -1)
  fi
  build_s=$((SECONDS - start))
  echo "built $TAG with $ENGINE in $((build_s / 60)) min $((build_s % 60)) s; size: $size"
else
  echo "checks only (--no-build): $TAG as built before"
  # an image not there: the engine's own error (exit 125) becomes the line below
  if [ "$ENGINE" = docker ]; then size=$(docker image ls --format '{{.Size}}' "$TAG" 2>/dev/null | head -1 || true)
  else size=$(buildah images --noheading --format '{{.Size}}' "$TAG" 2>/dev/null | head -1 || true); fi
  [ -n "$size" ] || { echo "build_image.sh: no image '$TAG' to check (build it first)" >&2; exit 2; }
fi

# ---- checks inside the image ------------------------------------------------------------------
in_image() {  # run a shell command in a fresh container of the image, in its project folder
  if [ "$ENGINE" = docker ]; then  # the CUDA image's checks run on the GPUs
    if [ "$TORCH" = cuda ]; then docker run --rm --gpus all --ipc host "$TAG" bash -c "$1"
    else docker run --rm "$TAG" bash -c "$1"; fi
  else
    local ctr status=0
    ctr=$(buildah from --pull-never -q "$TAG")
    nice -n 10 buildah run --isolation chroot "$ctr" -- bash -c "$1" || status=$?
    buildah rm "$ctr" >/dev/null
    return "$status"
  fi
}
PASSED=() FAILED=()
run_check() {  # one named check inside the image; its output on stdout (smoke: the report)
  case "$1" in
    help) in_image 'multilab --help' >/dev/null ;;
    smoke)
      in_image 'dvc exp run -q -S profile=smoke >/tmp/repro.log 2>&1 || { tail -40 /tmp/repro.log >&2; exit 1; }
                cat reports/table1.csv' >"$OUT/table1.csv" ;;
    tests) in_image 'pip install -q -e ".[dev]" && pytest -m "not slow" -p no:cacheprovider' ;;
  esac
}
for check in ${CHECKS//,/ }; do
  [ "$check" != none ] || continue
  case "$check" in
    help) echo "check: multilab --help" ;;
    smoke) echo "check: the default study on the smoke profile (dvc exp run -S profile=smoke)" ;;
    tests) echo "check: pytest -m 'not slow' (dev extras installed in a throwaway container)" ;;
  esac
  check_start=$SECONDS
  if run_check "$check"; then
    PASSED+=("$check"); echo "check $check passed in $((SECONDS - check_start)) s"
    [ "$check" != smoke ] || echo "smoke report: $OUT/table1.csv ($(($(wc -l <"$OUT/table1.csv") - 1)) rows)"
  else
    FAILED+=("$check"); echo "check $check FAILED after $((SECONDS - check_start)) s"
  fi
done
# the record of this build: what was built, by what, how long it took, what passed inside
python3 - "$OUT/image-build.json" <<PY
import json, os, sys, time
json.dump({
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "commit": "$COMMIT", "engine": "$ENGINE", "torch": "$TORCH",
    "image": "$TAG", "size": "$size", "built": $BUILD == 1, "build_s": $build_s,
    "base_image": "${BASE_IMAGE}" if "$ENGINE" == "buildah" else None,
    "base_build_s": int("${BASE_BUILD_S}") if "${BASE_BUILD_S}" else None,
    "checks_passed": "${PASSED[*]:-}".split(), "checks_failed": "${FAILED[*]:-}".split(),
    "cpu_count": os.cpu_count(),
    "load_average_at_start": "$LOAD_AT_START", "nice_10": "$ENGINE" == "buildah",  # docker builds in its daemon, not niced
}, open(sys.argv[1], "w"), indent=1)
PY
echo "done: $TAG ($ENGINE, torch $TORCH); record: $OUT/image-build.json"
[ "${#FAILED[@]}" = 0 ] || { echo "failed checks: ${FAILED[*]}" >&2; exit 1; }
exit
}
