#!/usr/bin/env bash
# The lab's background lanes: N trainings of one thread each, nice 19, each in a
# clone of this checkout's commit, running what `multilab study next --lanes N --hours H`
# packs into the hours a session has left (whole run sets in the order to train, then one
# model a lane that spans sessions). Every lane's `multilab` checkpoints each 50 steps
# (studies/lane_packing.py, LANE_CHECKPOINT_EVERY), so a session's stop loses minutes of it.
# `harvest` copies their records back here; `start` harvests first, then resets each clone
# to this checkout's commit.
#
#   bash scripts/lanes.sh resume              THE FIRST COMMAND OF A SESSION: restart every
#                                             lane the last session's stop ended, in its clone,
#                                             same command (training resumes from its last
#                                             checkpoint); a lane whose clone is gone (a new
#                                             machine) gets a new clone with its parked
#                                             checkpoint and queue (see park), else is reported
#                                             lost and starts again from step 0; finished
#                                             lanes stay ended
#   bash scripts/lanes.sh park                THE LAST COMMAND OF A SESSION (then the git add
#                                             and commit it prints): each unfinished lane's
#                                             newest complete checkpoint and its queue into
#                                             lanes-parked/laneK/ (one checkpoint a lane kept,
#                                             ~15 MB; only the repository survives a new
#                                             machine); safe while the lanes run
#   bash scripts/lanes.sh start [HOURS] [N] [STUDY ...]
#                                             clone, set up, start (default: 2.5 h, 2 lanes,
#                                             every study's claims; STUDY: only those studies)
#   bash scripts/lanes.sh run 'COMMAND' ...   one lane per command instead of the plan: a row
#                                             the plan leaves out for want of a measured time
#                                             (benchmarks/bench_row_steps.py prices it)
#   bash scripts/lanes.sh queue K 'COMMAND' ...
#                                             what lane K runs after its command ends with
#                                             exit 0, in its clone, one after the other (a
#                                             finished lane starts the first now); the queue
#                                             (LANES_DIR/laneK.queue) is this machine's; park
#                                             commits it
#   bash scripts/lanes.sh status              each lane's state and last line
#   bash scripts/lanes.sh pause | continue    SIGSTOP / SIGCONT every lane (tests, timings)
#   bash scripts/lanes.sh harvest [--force]   copy the lanes' new records into results/ (a
#                                             record that differs from this checkout's is
#                                             reported, copied only with --force); deletes
#                                             the parked checkpoint of a finished model
#   bash scripts/lanes.sh stop                SIGTERM every lane: its run ends KILLED, and
#                                             `resume` leaves it stopped
#
# Why clones: a record names the commit and whether src/ differed from it, and this checkout
# changes while you work; each lane also builds into its own artifacts/ and MLflow store.
# A second set of lanes for other studies (the real-language ones, say) needs its own LANES_DIR.
# Lanes live in LANES_DIR (default: lanes/ beside this checkout): laneK/ (the clone, with its
# .venv), laneK.command (what it runs), laneK.host, laneK.session (and laneK.start, its
# leader's start time: a recycled session number is never signalled), laneK.log, laneK.exit (its
# command ended by itself: the status), laneK.stopped (by `stop`), laneK.queue (one command a
# line) and laneK.queue.lock (held while the queue is appended to or its first line taken).
# results/lanes.tsv here lists the lanes not finished (number, host, start, last checkpoint,
# command): committed with the records, it tells a new machine's `resume` what its lost lanes
# ran. Harvest and commit before the session stops: a new checkout has only what was
# committed. One start, run or resume at a time in a LANES_DIR (LANES_DIR/.lanes.lock; a
# second is refused).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${LANES_DIR:-$(dirname "$root")/lanes}"
action="${1:-}"

manifest="$root/results/lanes.tsv"
parked="$root/lanes-parked"  # each lane's newest checkpoint and queue, committed by `park`

lanes() {  # the numbers of the lanes with a command, in order
  local file
  for file in "$dir"/lane*.command; do
    [ -f "$file" ] || continue
    file="${file##*/lane}"
    echo "${file%.command}"
  done | sort -n
}

started_at() {  # process $1's start time (clock ticks since boot: /proc/PID/stat's 22nd field)
  sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}

session_of() {  # lane $1's process session while it may still be the lane's: never that of a
  # finished lane, a damaged laneK.session, or a number another process took since (its
  # leader's start time differs from laneK.start); a leader gone with its session still
  # alive keeps its number (Linux reuses none that a live session holds)
  local sid start
  [ -f "$dir/lane$1.exit" ] && return 0
  sid="$(head -c 32 "$dir/lane$1.session" 2>/dev/null | tr -d '[:space:]')" || true
  [[ $sid =~ ^[0-9]+$ ]] && [ "$sid" -gt 1 ] || return 0
  start="$(cat "$dir/lane$1.start" 2>/dev/null || true)"
  if [ -n "$start" ] && [ -r "/proc/$sid/stat" ] && [ "$(started_at "$sid")" != "$start" ]; then
    return 0
  fi
  echo "$sid"
}

alive() {  # whether lane $1's process session still has a process
  local sid
  sid="$(session_of "$1")"
  [ -n "$sid" ] && pgrep -s "$sid" >/dev/null
}

sessions() {  # the process sessions of the started lanes (lanes started before laneK.command too)
  local file k
  for file in "$dir"/lane*.session; do
    [ -f "$file" ] || continue
    k="${file##*/lane}"
    session_of "${k%.session}"
  done
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

newest_progress() {  # the progress.json of lane $1's newest checkpoint folder, or nothing:
  # under artifacts/checkpoints/ (a plain `multilab train`) or a study's own
  # artifacts/studies/<study>/checkpoints/ (model_dir.checkpoint_home under its paths.artifacts),
  # in a checkpoint-<step>/ folder (what checkpoint_of reports and park_lane copies)
  find "$dir/lane$1/artifacts" -path '*/checkpoints/*' -path '*/checkpoint-[0-9]*/progress.json' \
    -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-
}

checkpoint_of() {  # lane $1's latest checkpoint: "MODEL step S/T", or nothing
  local found step total
  found="$(newest_progress "$1")"
  [ -n "$found" ] || return 0
  # bytes, not characters (a damaged file is no UTF-8), and numbers only: this goes into
  # the committed results/lanes.tsv
  step="$(LC_ALL=C sed -n 's/.*"step": *\([0-9][0-9]*\).*/\1/p' "$found" | head -n 1)"
  total="$(LC_ALL=C sed -n 's/.*"total_steps": *\([0-9][0-9]*\).*/\1/p' "$found" | head -n 1)"
  found="${found#"$dir/lane$1/artifacts/"}"
  found="${found/checkpoints\//}"  # the model's folder under artifacts/
  echo "${found%/*/*/progress.json} step ${step:-?}/${total:-?}"
}

write_manifest() {  # results/lanes.tsv: the lanes not finished, for a new machine's resume
  local k text=""
  for k in $(lanes); do
    [ -f "$dir/lane$k.exit" ] || [ -f "$dir/lane$k.stopped" ] && continue
    text+="$k	$(cat "$dir/lane$k.host" 2>/dev/null || true)	$(cat "$dir/lane$k.since" 2>/dev/null || true)	$(checkpoint_of "$k")	$(cat "$dir/lane$k.command")"$'\n'
  done
  if [ -z "$text" ]; then
    rm -f "$manifest"
  elif [ "$(cat "$manifest" 2>/dev/null)"$'\n' != "$text" ]; then
    mkdir -p "$(dirname "$manifest")"
    printf '%s' "$text" > "$manifest"
  fi
}

start_lane() {  # start lane $1's command in its clone; its state in LANES_DIR
  local k=$1 started
  rm -f "$dir/lane$k.exit" "$dir/lane$k.stopped"
  hostname > "$dir/lane$k.host"
  date -u +%FT%TZ > "$dir/lane$k.since"
  # the exit status is written only when the command ends by itself: a session's stop
  # (SIGTERM, SIGKILL of the whole process group) ends this shell first
  # 9>&-: the lane never holds this script's lock (lock_lanes)
  # then, while each command succeeds, the next line of laneK.queue becomes laneK.command
  # (so a stop mid-queue resumes the command it was running) and runs; the line is taken
  # under the queue's lock (queue_lock: `sed -i` replaces the file, and an append of
  # `lanes.sh queue` to the old one would be lost)
  started="$(cd "$dir/lane$k" && bash scripts/background.sh "$dir/lane$k.log" bash -c \
    'while :; do bash -c "$(cat "$1")"; status=$?; [ "$status" -eq 0 ] || break
       next="$( { flock 8; next="$(head -n 1 "$3" 2>/dev/null)"
                  if [ -n "$next" ]; then printf "%s\n" "$next" > "$1"; sed -i 1d "$3"; fi
                  printf "%s" "$next"; } 8>> "$3.lock")"
       [ -n "$next" ] || break
       echo "== $(date -u +%FT%TZ) next: $next"
     done; echo "$status" > "$2"' lane "$dir/lane$k.command" "$dir/lane$k.exit" \
    "$dir/lane$k.queue" 9>&-)"
  echo "$started" | sed -n 's/.*session \([0-9]*\):.*/\1/p' > "$dir/lane$k.session"
  started_at "$(cat "$dir/lane$k.session")" > "$dir/lane$k.start" || true  # ended already: none
}

setup_lane() {  # clone this checkout into lane $1 (or reset its clone to it), in the background
  local lane="$dir/lane$1"
  if [ -d "$lane/.git" ]; then
    git -C "$lane" fetch -q "$root" HEAD && git -C "$lane" reset -q --hard FETCH_HEAD
  else
    rm -rf "$lane"
    git clone -q "$root" "$lane"
  fi
  (cd "$lane" && bash scripts/setup.sh > "$dir/setup$1.log" 2>&1) &
}

release() {  # drop host $2's bookings from lane $1's ledger: its own, those not in its
  # commit's ledger (a restart in its clone), or ($3 = lost: a machine that is gone) all of
  # them, and here too
  local lane="$dir/lane$1" committed
  committed="$(mktemp)"
  [ "${3:-}" = lost ] || git -C "$lane" show HEAD:results/ledger.csv > "$committed" 2>/dev/null \
    || : > "$committed"
  (cd "$lane" && .venv/bin/python -m multilab.studies.ledger release results "$2" "$committed") \
    | sed "s/^/lane $1: /" || echo "lane $1: its bookings by $2 not released" >&2
  if [ "${3:-}" = lost ]; then
    (cd "$root" && .venv/bin/python -m multilab.studies.ledger release results "$2") \
      | sed "s/^/this checkout: /" || echo "this checkout: bookings by $2 not released" >&2
  fi
  rm -f "$committed"
}

lock_lanes() {  # one lanes.sh at a time starts lanes in LANES_DIR (two terminals, a
  # second `start` while the first sets its clones up: both found no lane running)
  mkdir -p "$dir"
  exec 9>> "$dir/.lanes.lock"
  flock -n 9 || { echo "lanes.sh $action: another lanes.sh is starting or resuming lanes in" \
    "$dir; wait for it, then: bash scripts/lanes.sh status" >&2; exit 2; }
}

no_arguments() {  # `stop 2` stopped every lane: the actions on all lanes take no argument
  [ $# -eq 0 ] || { echo "lanes.sh $action: takes no arguments (${*@Q}); it acts on every" \
    "lane" >&2; exit 2; }
}

queued_next() {  # whether lane $1's command finished (exit 0) with a command queued after it
  [ "$(cat "$dir/lane$1.exit" 2>/dev/null)" = 0 ] && [ -s "$dir/lane$1.queue" ]
}

queue_lock() {  # the lock file of lane $1's queue: whoever appends to laneK.queue or takes
  # its first line holds it (flock), so that an append never lands in the file `sed -i 1d`
  # is replacing; the queue itself stays one command a line
  echo "$dir/lane$1.queue.lock"
}

start_queued() {  # lane $1's next queued command becomes its command, and starts
  local k=$1 line
  line="$( { flock 8; line="$(head -n 1 "$dir/lane$k.queue")"
             printf '%s\n' "$line" > "$dir/lane$k.command"
             sed -i 1d "$dir/lane$k.queue"
             printf '%s' "$line"; } 8>> "$(queue_lock "$k")")"
  start_lane "$k"
  echo "lane $k: its command finished; started the next one queued: $line"
}

parked_checkpoint() {  # lane $1's parked checkpoint folder in this checkout, or nothing
  find "$parked/lane$1" -path '*/checkpoint-[0-9]*' -prune -type d 2>/dev/null | head -n 1 \
    || true  # none parked
}

complete_checkpoint() {  # whether folder $1 is a whole checkpoint: its files, state.pt's hash
  local file
  for file in state.pt state.sha256 progress.json model.safetensors config.json; do
    [ -f "$1/$file" ] || return 1
  done
  [ "$(sha256sum "$1/state.pt" | cut -d' ' -f1)" = "$(tr -d '[:space:]' < "$1/state.sha256")" ]
}

park_lane() {  # copy lane $1's newest complete checkpoint to lanes-parked/lane$1/ (the one
  # kept), its queue to lanes-parked/lane$1.queue; safe beside the running lane: a
  # checkpoint is renamed into place whole, and one deleted mid-copy (a newer one replaced
  # it) fails the check and is copied again
  local k=$1 lane="$dir/lane$1" try found source relative stage
  if [ -s "$dir/lane$k.queue" ]; then
    mkdir -p "$parked" && cp -- "$dir/lane$k.queue" "$parked/lane$k.queue"
  else
    rm -f "$parked/lane$k.queue"
  fi
  for try in 1 2 3; do
    found="$(newest_progress "$k")"
    [ -n "$found" ] || { echo "lane $k: no checkpoint yet, nothing parked"; return 0; }
    source="${found%/progress.json}"
    relative="${source#"$lane/artifacts/"}"
    stage="$parked/.lane$k.partial"
    rm -rf "$stage"
    mkdir -p "$stage/$(dirname "$relative")"
    if cp -r -- "$source" "$stage/$relative" 2>/dev/null && complete_checkpoint "$stage/$relative"
    then
      find "$stage" -name '*.lock' -delete
      rm -rf "$parked/lane$k"
      mv "$stage" "$parked/lane$k"
      echo "lane $k: parked $(checkpoint_of "$k"): ${parked#"$root/"}/lane$k/$relative"
      return 0
    fi
    rm -rf "$stage"
  done
  echo "lanes.sh park: lane $k: no complete checkpoint copied in 3 tries ($source); park again" >&2
  return 1
}

park() {  # every unfinished lane's newest checkpoint and queue into this checkout (see the top)
  local k failed=0 paths
  write_manifest
  for k in $(lanes); do
    [ -f "$dir/lane$k.exit" ] || [ -f "$dir/lane$k.stopped" ] && continue
    park_lane "$k" || failed=1
  done
  paths="$(cd "$root" && for p in lanes-parked results/lanes.tsv; do
    [ -e "$p" ] || git ls-files --error-unmatch "$p" >/dev/null 2>&1 && printf ' %s' "$p"; done)"
  [ -n "$paths" ] && echo "then: git add -A$paths && git commit -m 'park lanes'"
  return "$failed"
}

restore_parked() {  # lane $1's new clone gets its parked checkpoint and queue back
  local k=$1 source
  source="$(parked_checkpoint "$k")"
  if [ -n "$source" ]; then
    mkdir -p "$dir/lane$k/artifacts/$(dirname "${source#"$parked/lane$k/"}")"
    cp -r -- "$source" "$dir/lane$k/artifacts/${source#"$parked/lane$k/"}"
    echo "lane $k: restored from parked checkpoint $(checkpoint_of "$k") on a new machine"
  fi
  if [ -s "$parked/lane$k.queue" ] && [ ! -s "$dir/lane$k.queue" ]; then
    cp -- "$parked/lane$k.queue" "$dir/lane$k.queue"
    echo "lane $k: restored its queue ($(wc -l < "$dir/lane$k.queue") command(s))"
  fi
  return 0
}

resume() {  # restart what a session's stop ended (see the top)
  local k host since lost line setups=()
  mkdir -p "$dir"
  if [ -f "$manifest" ]; then  # a new machine: the lanes the last commit says were running
    local number=0 entry
    while IFS= read -r entry || [ -n "$entry" ]; do
      number=$((number + 1))
      # split at tabs by hand: `read` merges two tabs (an empty field: no checkpoint yet)
      IFS=$'\x1f' read -r k host since lost line <<< "${entry//$'\t'/$'\x1f'}"
      line="${line//$'\x1f'/$'\t'}"  # the command's own tabs
      if ! [[ $k =~ ^[0-9]+$ && $entry == *$'\t'*$'\t'*$'\t'*$'\t'* ]]; then
        echo "lanes.sh resume: $manifest line $number: not a lane (number, host, start," \
          "checkpoint, command; a merge's conflict marker?), passed over: ${entry:0:80}" >&2
        continue
      fi
      [ ! -f "$dir/lane$k.command" ] || continue  # listed twice (both sides of a merge)
      echo "$line" > "$dir/lane$k.command"
      echo "$host" > "$dir/lane$k.host"
      echo "$since" > "$dir/lane$k.since"
      echo "$lost" > "$dir/lane$k.lost"
    done < "$manifest"
  fi
  [ -n "$(lanes)" ] || { echo "lanes.sh resume: no lanes in $dir (start some: bash scripts/lanes.sh start)" >&2; exit 0; }
  harvest || true  # a record it will not copy is said; the clones are not reset
  for k in $(lanes); do
    line="$(cat "$dir/lane$k.command")"
    if queued_next "$k"; then
      start_queued "$k"
    elif [ -f "$dir/lane$k.exit" ]; then
      echo "lane $k: finished (exit $(cat "$dir/lane$k.exit")), not restarted: $line"
    elif [ -f "$dir/lane$k.stopped" ]; then
      echo "lane $k: stopped by lanes.sh stop, not restarted: $line"
    elif alive "$k"; then
      echo "lane $k: running, left alone"
    elif [ -d "$dir/lane$k/.git" ] && [ -x "$dir/lane$k/.venv/bin/python" ]; then
      release "$k" "$(cat "$dir/lane$k.host" 2>/dev/null || hostname)"
      lost="$(checkpoint_of "$k")"
      start_lane "$k"
      echo "lane $k: resumed in its clone${lost:+ (its last checkpoint: $lost)}: $line"
    elif [ -n "$(parked_checkpoint "$k")" ]; then
      echo "lane $k: its clone $dir/lane$k is gone (a new machine); a new clone continues" \
        "from its parked checkpoint: $line"
      setups+=("$k")
      setup_lane "$k"
    else
      host="$(cat "$dir/lane$k.host" 2>/dev/null || true)"
      since="$(cat "$dir/lane$k.since" 2>/dev/null || true)"
      lost="$(cat "$dir/lane$k.lost" 2>/dev/null || true)"
      echo "lane $k: LOST: its clone $dir/lane$k is gone (started on ${host:-?}${since:+ at" \
        "$since}); lost: its" \
        "checkpoints${lost:+ (the last: $lost)} and its records not harvested; its command" \
        "starts again from step 0 in a new clone: $line"
      setups+=("$k")
      setup_lane "$k"
    fi
  done
  if [ ${#setups[@]} -gt 0 ]; then
    wait || { echo "lanes.sh: a lane's set-up failed (see $dir/setup*.log)" >&2; exit 1; }
    for k in "${setups[@]}"; do
      host="$(cat "$dir/lane$k.host" 2>/dev/null || true)"
      # that machine is gone: its bookings can never be released by their processes
      [ -n "$host" ] && [ "$host" != "$(hostname)" ] && release "$k" "$host" lost
      rm -f "$dir/lane$k.lost"
      restore_parked "$k"
      start_lane "$k"
    done
  fi
  write_manifest
}

unpark_finished() {  # a lane's parked checkpoint goes once its model finished in the clone
  # (its multilab.json names the checkpoint's fingerprint): its record is harvested now
  local source k relative model fingerprint
  for source in "$parked"/lane*/; do
    [ -d "$source" ] || continue
    k="${source%/}"; k="${k##*/lane}"
    source="$(parked_checkpoint "$k")"
    [ -n "$source" ] || continue
    relative="${source#"$parked/lane$k/"}"
    fingerprint="$(basename "$(dirname "$relative")")"
    model="$(dirname "$(dirname "$relative")")"
    model="${model/checkpoints\//}"
    if grep -qs "\"fingerprint\": *\"$fingerprint\"" "$dir/lane$k/artifacts/$model/multilab.json"
    then
      rm -rf "${parked:?}/lane$k"
      echo "lanes.sh harvest: lane $k's $model finished: deleted its parked checkpoint" \
        "(${parked#"$root/"}/lane$k; commit the deletion)" >&2
    fi
  done
}

harvest() {  # copy every lane's new records into this checkout's results/ (see the top)
  local force="${1:-}" lane entry status path source target copied=0 refused=0 results
  results="$(realpath -m "$root/results")"
  for lane in "$dir"/lane*/; do
    [ -d "$lane/results" ] || continue
    while IFS= read -r -d '' entry; do
      status="${entry:0:2}"
      path="${entry:3}"
      case "$status" in R*|C*) IFS= read -r -d '' _ || true ;; esac  # a rename's old name
      case "$path" in results/ledger.csv|results/lanes.tsv|results/.*|*/.*) continue ;; esac
      source="$lane$path"
      target="$root/$path"
      case "/$path/" in
        */../*|*/./*) echo "lanes.sh harvest: skipped $path: not a plain path" >&2; continue ;;
      esac
      case "$(realpath -m "$target")" in
        "$results"/*) ;;
        *) echo "lanes.sh harvest: skipped $path: outside results/" >&2; continue ;;
      esac
      if [ ! -e "$source" ] && [ ! -L "$source" ]; then
        continue  # deleted in the lane: nothing to copy (this checkout's stays)
      fi
      if [ -L "$source" ] || [ ! -f "$source" ]; then
        echo "lanes.sh harvest: skipped $path in $lane: not a plain file" >&2
        continue
      fi
      cmp -s "$source" "$target" && continue  # here already (an earlier harvest)
      if [ -e "$target" ] && [ "$force" != --force ]; then
        echo "lanes.sh harvest: NOT copied $path: it differs from this checkout's (the lane" \
          "$(basename "$lane") edited it; compare them, then harvest --force to take the" \
          "lane's)" >&2
        refused=$((refused + 1))
        continue
      fi
      mkdir -p "$(dirname "$target")"
      cp -- "$source" "$target"
      echo "$path"
      copied=$((copied + 1))
    done < <(git -C "$lane" status --porcelain -z --untracked-files=all -- results)
  done
  unpark_finished
  echo "harvested $copied file(s)$([ "$refused" -gt 0 ] && echo ", $refused not (above)");" \
    "then: multilab study report --all, and commit" >&2
  if [ "$refused" -gt 0 ]; then return 3; fi
}

case "$action" in
  start|run)
    if [ "$action" = start ]; then
      hours="${2:-2.5}"
      lanes="${3:-2}"
      [[ $hours =~ ^[0-9]*\.?[0-9]+$ && $hours =~ [1-9] ]] || { echo "lanes.sh start: HOURS" \
        "${hours@Q}; valid: a number of hours above 0 (2.5)" >&2; exit 2; }
      [[ $lanes =~ ^0*[1-9][0-9]{0,3}$ ]] || { echo "lanes.sh start: N ${lanes@Q}; valid: a" \
        "whole number of lanes from 1 (2)" >&2; exit 2; }
      shift $(($# < 3 ? $# : 3))
    else
      shift
      [ $# -gt 0 ] || { echo "lanes.sh run: name the lanes' commands, e.g. 'multilab study run k2020-table10 --rows char --seeds 43'" >&2; exit 2; }
      for line in "$@"; do  # an empty one would start a lane that does nothing, or none
        case "$line" in
          *[![:space:]]*) ;;
          *) echo "lanes.sh run: command ${line@Q} is empty; name what each lane runs" >&2; exit 2 ;;
        esac
        case "$line" in
          *$'\n'*) echo "lanes.sh run: command ${line@Q} has a line break; one line a lane (join with ;)" >&2; exit 2 ;;
        esac
      done
    fi
    lock_lanes
    if running; then
      echo "lanes.sh: lanes are running (bash scripts/lanes.sh status); stop them first" >&2
      exit 2
    fi
    [ -x "$root/.venv/bin/multilab" ] || { echo "lanes.sh: set up first (bash scripts/setup.sh)" >&2; exit 2; }
    git -C "$root" diff --quiet HEAD -- src studies params.yaml \
      || echo "lanes.sh: uncommitted changes to src/, studies/ or params.yaml are not in the lanes (they run HEAD)" >&2
    # what earlier lanes left: the plan reads it, and their clones are reset below
    harvest || { echo "lanes.sh: not started: resetting the clones would lose the records above" >&2; exit 3; }
    if [ "$action" = start ]; then
      plan="$(cd "$root" && .venv/bin/multilab study next "$@" --lanes "$lanes" --hours "$hours" --lanes-dir "$dir" --shell)"
      [ -n "$plan" ] || { echo "lanes.sh: nothing to train in $hours h" >&2; exit 0; }
    else  # the lanes' checkpoint interval, as the plan's commands have it
      plan="$(cd "$root" && .venv/bin/python -c 'from multilab.studies.lane_packing import lane_command; import sys; print("\n".join(map(lane_command, sys.argv[1:])))' "$@")"
    fi
    mkdir -p "$dir"
    rm -f "$dir"/lane*.session "$dir"/lane*.command "$dir"/lane*.exit "$dir"/lane*.stopped \
      "$dir"/lane*.queue \
      "$dir"/lane*.host "$dir"/lane*.since "$dir"/lane*.lost "$dir"/lane*.start
    number=0
    while IFS= read -r line; do
      number=$((number + 1))
      [ -n "$line" ] || continue  # a lane the plan leaves empty keeps its number
      printf '%s\n' "$line" > "$dir/lane$number.command"
      setup_lane "$number"
    done <<< "$plan"
    wait || { echo "lanes.sh: a lane's set-up failed (see $dir/setup*.log)" >&2; exit 1; }
    for k in $(lanes); do
      start_lane "$k"
      echo "lane $k: $(cat "$dir/lane$k.command")"
    done
    write_manifest
    echo "logs: $dir/lane*.log; pause for tests: bash scripts/lanes.sh pause; next session: bash scripts/lanes.sh resume"
    ;;
  resume) no_arguments "${@:2}"; lock_lanes; resume ;;
  park) no_arguments "${@:2}"; park ;;
  queue)
    k="${2:-}"
    [[ $k =~ ^[1-9][0-9]*$ ]] && [ -f "$dir/lane$k.command" ] \
      || { echo "lanes.sh queue: lane ${k@Q} has no command; lanes: $(lanes | tr '\n' ' ')" >&2; exit 2; }
    shift 2
    [ $# -gt 0 ] || { echo "lanes.sh queue: name the commands lane $k runs next" >&2; exit 2; }
    for line in "$@"; do
      case "$line" in
        *$'\n'*|'') echo "lanes.sh queue: command ${line@Q} is empty or has a line break" >&2; exit 2 ;;
      esac
    done
    [ -x "$root/.venv/bin/python" ] || { echo "lanes.sh queue: no $root/.venv/bin/python;" \
      "set up first (bash scripts/setup.sh); nothing queued" >&2; exit 2; }
    lock_lanes
    commands="$(cd "$root" && .venv/bin/python -c 'from multilab.studies.lane_packing import lane_command; import sys; print("\n".join(map(lane_command, sys.argv[1:])))' "$@")" \
      || { echo "lanes.sh queue: the commands could not be read (above); nothing queued" >&2; exit 2; }
    { flock 8; printf '%s\n' "$commands" >> "$dir/lane$k.queue"; } 8>> "$(queue_lock "$k")"
    echo "lane $k: $(wc -l < "$dir/lane$k.queue") command(s) queued after: $(cat "$dir/lane$k.command")"
    # a finished lane starts it now (lane K alone: resume would restart every other lane a
    # session's stop ended, and harvest)
    if queued_next "$k"; then start_queued "$k"; write_manifest; fi
    ;;
  status)
    no_arguments "${@:2}"
    compgen -G "$dir/lane*.log" >/dev/null || echo "lanes.sh status: no lanes in $dir" >&2
    for log in "$dir"/lane*.log; do
      [ -f "$log" ] || continue
      k="$(basename "$log" .log)"
      k="${k#lane}"
      state=""
      if [ -f "$dir/lane$k.exit" ]; then state="finished (exit $(cat "$dir/lane$k.exit")): "
      elif [ -f "$dir/lane$k.stopped" ]; then state="stopped: "
      elif [ -f "$dir/lane$k.command" ]; then
        alive "$k" && state="running: " || state="ended by a session's stop (resume restarts it): "
      fi
      [ -s "$dir/lane$k.queue" ] && state+="($(wc -l < "$dir/lane$k.queue") queued) "
      echo "lane$k: $state$(tail -c 400 "$log" | tr '\r' '\n' | grep -v '^$' | tail -n 1)"
    done
    ;;
  pause) no_arguments "${@:2}"; signal STOP ;;
  continue) no_arguments "${@:2}"; signal CONT ;;
  stop)
    no_arguments "${@:2}"
    for k in $(lanes); do alive "$k" && touch "$dir/lane$k.stopped"; done
    signal TERM; signal CONT  # a paused lane gets its TERM once it runs again
    write_manifest
    ;;
  harvest)
    if [ $# -gt 2 ] || { [ $# -eq 2 ] && [ "$2" != --force ]; }; then
      echo "lanes.sh harvest: ${*:2}: valid: harvest, or harvest --force" >&2
      exit 2
    fi
    write_manifest; harvest "${2:-}" ;;
  *)
    echo "usage: bash scripts/lanes.sh resume | park | start [HOURS] [N] [STUDY ...] | run 'COMMAND' ... | queue K 'COMMAND' ... | status | pause | continue | harvest [--force] | stop" >&2
    exit 2
    ;;
esac
