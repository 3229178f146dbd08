#!/usr/bin/env bash
# Conneau et al. 2020 §5 (Figure 2): independently trained monolingual models, compared layer by layer.
# Trains an `original` model on each edition alone (English `3` twice, seeds 42 and 43, the
# second standing in for Fake-English: see below), then runs `multilab similarity` for
# English against every other edition and against its second seed. Each edition's corpora,
# vocabulary and models live in artifacts/mono/<edition>/ (metrics in metrics/mono/), so the
# workspace's own study is untouched; the pairs land in reports/similarity/ and the next
# `multilab report` draws Figure 2 from them.
#
#   bash scripts/seed003_similarity.sh                         # quick profile, English–French
#   bash scripts/seed003_similarity.sh -p paper l s r c        # the paper's four pairs
#   bash scripts/seed003_similarity.sh -p smoke --verses 40 s  # the tests' run
#   bash scripts/seed003_similarity.sh --seed 43 l             # one more seed of a pair (no
#                                                              # control): a study row's script
#
# English vs Fake-English: Dufter & Schütze 2020's Fake-English is English with every id shifted; a model
# trained on it alone sees English with its embedding rows permuted, which is an English model
# with other random draws. So the pair is English seed 42 against English seed 43, both reading
# the English verses (identity dictionary).
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=quick
VERSES=1000
SEED=
EDITIONS=()
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -p|--profile) PROFILE=${2:?--profile needs a name}; shift 2 ;;
    --verses) VERSES=${2:?--verses needs a number}; shift 2 ;;
    --seed) SEED=${2:?--seed needs a number}; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "seed003_similarity.sh: unknown option $1" >&2; usage ;;
    *) EDITIONS+=("$1"); shift ;;
  esac
done
[ ${#EDITIONS[@]} -gt 0 ] || EDITIONS=(l)
MULTILAB=${MULTILAB:-multilab}
command -v "$MULTILAB" >/dev/null || MULTILAB=.venv/bin/multilab

settings() {  # the one-edition study of $1
  echo --set "profile=$PROFILE" --set "languages=[$1]" --set 'study=[original]' \
    --set "paths.artifacts=artifacts/mono/$1" --set "paths.metrics=metrics/mono/$1"
}
model() { echo "artifacts/mono/$1/models/original/seed$2"; }
train() {  # edition seed: corpora and vocabulary once per edition, then the model
  # shellcheck disable=SC2046
  [ -f "artifacts/mono/$1/vocab/blocks.json" ] || {
    "$MULTILAB" $(settings "$1") corpus export
    "$MULTILAB" $(settings "$1") corpus build
    "$MULTILAB" $(settings "$1") vocab
  }
  # shellcheck disable=SC2046
  "$MULTILAB" $(settings "$1") train --modification original --seed "$2"
}

CONTROL=yes  # English against a second English seed (42 against 43), only without --seed
[ -n "$SEED" ] && CONTROL=
SEED=${SEED:-42}
case "$SEED" in *[!0-9]*) echo "seed003_similarity.sh: --seed $SEED: a whole number" >&2; exit 2 ;; esac
for edition in 3 "${EDITIONS[@]}"; do train "$edition" "$SEED"; done
[ -z "$CONTROL" ] || train 3 43
# shellcheck disable=SC2046
for edition in "${EDITIONS[@]}"; do
  "$MULTILAB" $(settings 3) similarity "$(model 3 "$SEED")" "$(model "$edition" "$SEED")" \
    --languages "3,$edition" --verses "$VERSES"
done
[ -z "$CONTROL" ] && exit 0
# shellcheck disable=SC2046
"$MULTILAB" $(settings 3) similarity "$(model 3 42)" "$(model 3 43)" --languages 3,3 \
  --verses "$VERSES"
