#!/usr/bin/env bash
# The lab's background lanes (issue 52): N trainings of one thread each, nice 19, each in a
# clone of this checkout's commit, running what `multilab study next --lanes N --hours H`
# packs into the hours a session has left (whole run sets in the order to train, only models
# whose records say they finish in time). `harvest` copies their records back here; `start`
# harvests first, then resets each clone to this checkout's commit.
#
#   bash scripts/lanes.sh start [HOURS] [N] [STUDY ...]
#                                             clone, set up, start (default: 2.5 h, 2 lanes,
#                                             every study's claims; STUDY: only those studies)
#   bash scripts/lanes.sh run 'COMMAND' ...   one lane per command instead of the plan: a row
#                                             the plan leaves out for want of a measured time
#                                             (benchmarks/bench_row_steps.py prices it)
#   bash scripts/lanes.sh status              each lane's last line
#   bash scripts/lanes.sh pause | resume      SIGSTOP / SIGCONT every lane (tests, timings)
#   bash scripts/lanes.sh harvest             copy the lanes' new records into results/
#   bash scripts/lanes.sh stop                SIGTERM every lane: its run ends KILLED
#
# Why clones: a record names the commit and whether src/ differed from it, and this checkout
# changes while you work; each lane also builds into its own artifacts/ and MLflow store.
# A second set of lanes for other studies (the real-language ones, say) needs its own LANES_DIR.
# Lanes live in LANES_DIR (default: lanes/ beside this checkout): laneK/ (the clone, with its
# .venv), laneK.log, laneK.session. Harvest and commit before the session stops: a new
# checkout has only what was committed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${LANES_DIR:-$(dirname "$root")/lanes}"
action="${1:-}"

sessions() {  # the process sessions of the started lanes
  cat "$dir"/lane*.session 2>/dev/null || true
}

running() {  # whether a started lane still has a process
  local sid
  for sid in $(sessions); do pgrep -s "$sid" >/dev/null && return 0; done
  return 1
}

signal() {  # signal every lane's process session
  local sid
  for sid in $(sessions); do pkill "-$1" -s "$sid" 2>/dev/null || true; done
}

harvest() {  # copy every lane's new or changed records into this checkout's results/
  local lane path copied=0
  for lane in "$dir"/lane*/; do
    [ -d "$lane/results" ] || continue
    while IFS= read -r path; do
      case "$path" in results/ledger.csv|results/.*) continue ;; esac
      cmp -s "$lane/$path" "$root/$path" && continue  # here already (an earlier harvest)
      mkdir -p "$root/$(dirname "$path")"
      cp "$lane/$path" "$root/$path"
      echo "$path"
      copied=$((copied + 1))
    done < <(git -C "$lane" status --porcelain --untracked-files=all -- results | cut -c4-)
  done
  echo "harvested $copied file(s); then: multilab study report --all, and commit" >&2
}

case "$action" in
  start|run)
    if [ "$action" = start ]; then
      hours="${2:-2.5}"
      lanes="${3:-2}"
      shift $(($# < 3 ? $# : 3))
    else
      shift
      [ $# -gt 0 ] || { echo "lanes.sh run: name the lanes' commands, e.g. 'multilab study run k2020-table10 --rows char --seeds 43'" >&2; exit 2; }
    fi
    if running; then
      echo "lanes.sh: lanes are running (bash scripts/lanes.sh status); stop them first" >&2
      exit 2
    fi
    [ -x "$root/.venv/bin/multilab" ] || { echo "lanes.sh: set up first (bash scripts/setup.sh)" >&2; exit 2; }
    git -C "$root" diff --quiet HEAD -- src studies params.yaml \
      || echo "lanes.sh: uncommitted changes to src/, studies/ or params.yaml are not in the lanes (they run HEAD)" >&2
    harvest  # what earlier lanes left: the plan reads it, and their clones are reset below
    if [ "$action" = start ]; then
      plan="$(cd "$root" && .venv/bin/multilab study next "$@" --lanes "$lanes" --hours "$hours" --shell)"
      [ -n "$plan" ] || { echo "lanes.sh: nothing fits in $hours h" >&2; exit 0; }
    else
      plan="$(printf '%s\n' "$@")"
    fi
    mkdir -p "$dir"
    rm -f "$dir"/lane*.session
    number=0
    while IFS= read -r line; do
      number=$((number + 1))
      lane="$dir/lane$number"
      if [ -d "$lane/.git" ]; then
        git -C "$lane" fetch -q "$root" HEAD && git -C "$lane" reset -q --hard FETCH_HEAD
      else
        git clone -q "$root" "$lane"
      fi
      (cd "$lane" && bash scripts/setup.sh > "$dir/setup$number.log" 2>&1) &
    done <<< "$plan"
    wait || { echo "lanes.sh: a lane's set-up failed (see $dir/setup*.log)" >&2; exit 1; }
    number=0
    while IFS= read -r line; do
      number=$((number + 1))
      started="$(cd "$dir/lane$number" && bash scripts/background.sh "$dir/lane$number.log" bash -c "$line")"
      echo "$started" | sed -n 's/.*session \([0-9]*\):.*/\1/p' > "$dir/lane$number.session"
      echo "lane $number: $line"
    done <<< "$plan"
    echo "logs: $dir/lane*.log; pause for tests: bash scripts/lanes.sh pause"
    ;;
  status)
    for log in "$dir"/lane*.log; do
      [ -f "$log" ] || continue
      echo "$(basename "$log" .log): $(tail -c 400 "$log" | tr '\r' '\n' | grep -v '^$' | tail -n 1)"
    done
    ;;
  pause) signal STOP ;;
  resume) signal CONT ;;
  stop) signal TERM; signal CONT ;;  # a paused lane gets its TERM once it runs again
  harvest) harvest ;;
  *)
    echo "usage: bash scripts/lanes.sh start [HOURS] [N] [STUDY ...] | run 'COMMAND' ... | status | pause | resume | harvest | stop" >&2
    exit 2
    ;;
esac
