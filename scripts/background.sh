#!/usr/bin/env bash
# A long command in the background of a machine you also work on (the lab's runs while you
# code): one thread, nice 19, and a scheduling group of its own at nice 19 (Linux autogroup:
# plain `nice` does not yield to work started in another terminal). Start and end lines, and
# everything it prints, go to LOG; it outlives the terminal. The project's virtualenv is used
# when there is one.
#
#   bash scripts/background.sh LOG [VAR=value ...] COMMAND [ARG ...]
#   bash scripts/background.sh lane1.log multilab study run dufter2020-table3 --seeds 43,44
#
# Pause it while you time something or run the tests, then go on:
#   pkill -STOP -s SESSION   …   pkill -CONT -s SESSION   (SESSION: printed at the start)
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/background.sh LOG [VAR=value ...] COMMAND [ARG ...]" >&2
  exit 2
fi
log=$1
shift
command_at=1  # the first argument that is not a VAR=value: the command (env without one
for arg in "$@"; do  # prints the whole environment, into the log)
  [[ $arg =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || break
  command_at=$((command_at + 1))
done
if [ "$command_at" -gt $# ]; then
  echo "background.sh: no COMMAND after ${*:-the log}; usage: bash scripts/background.sh LOG [VAR=value ...] COMMAND [ARG ...]" >&2
  exit 2
fi
if [ -z "${MULTILAB_BACKGROUND_CHILD:-}" ]; then
  if ! : 2>/dev/null >> "$log"; then  # say so here, not in the background
    echo "background.sh: cannot write the log $log" >&2
    exit 2
  fi
  MULTILAB_BACKGROUND_CHILD=1 setsid bash "$0" "$log" "$@" < /dev/null >> "$log" 2>&1 &
  echo "started in the background, session $!: $* (log: $log)"
  exit 0
fi
echo 19 > /proc/self/autogroup 2>/dev/null || true
[ -d .venv/bin ] && PATH="$(pwd)/.venv/bin:$PATH"
export PATH OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
unset MULTILAB_BACKGROUND_CHILD
echo "== $(date -u +%FT%TZ) start: $*"
status=0
nice -n 19 env -- "$@" || status=$?  # "--": a command starting with "-" is no option of env
echo "== $(date -u +%FT%TZ) exit $status: $*"
