#!/usr/bin/env bash
# Design cards one after another into OUT/store, each design's wall time in OUT/walls.tsv (design,
# seconds, date, scale, store): the last column is "clean" when the card trained every run it planned
# and "shared" when it found some already finished (another card's baselines, a study's runs), so its
# wall time is not a clean store's. The docs' card pages are written from OUT by
# `python bench/card_docs.py OUT`.
#   bash bench/run_cards.sh OUT DESIGN [DESIGN ...]     SCALE=smoke|cpu (default cpu)
#   PLUGINS="reslab_mix_pre_post" bash bench/run_cards.sh OUT mix-pre-post   (a plugin's design)
#   ARGS="--against pre-ln,post-ln" bash bench/run_cards.sh OUT sas           (more assess options)
set -euo pipefail
# shellcheck source=bench/walls.sh
source "$(dirname "$0")/walls.sh"
out=${1:?usage: bash bench/run_cards.sh OUT DESIGN [DESIGN ...]}
shift
scale=${SCALE:-cpu}
plugins=()
for m in ${PLUGINS:-}; do plugins+=(--plugin "$m"); done
mkdir -p "$out"
for design in "$@"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  reslab "${plugins[@]}" assess "$design" --scale "$scale" --store "$out/store" ${ARGS:-} \
    2> "$out/$design.log" | tail -1 > "$out/$design.path" || true
  record_wall "$out" "$design" "$start" "$scale"
  tail -n 20 "$out/$design.log"
done
