#!/usr/bin/env bash
# Design cards one after another into OUT/store, each card's wall time in OUT/walls.tsv (card label,
# seconds, date, scale, store): the store column is "clean" when the card trained every run it planned
# and "shared" when it found some already finished (another card's baselines, a study's runs), so its
# wall time is not a clean store's. The docs' card pages are written from OUT by
# `python bench/card_docs.py OUT`.
#   bash bench/run_cards.sh OUT DESIGN [DESIGN ...]     SCALE=smoke|cpu (default cpu)
#   bash bench/run_cards.sh OUT "pre-ln --set model.norm=derf"   (a card with its own settings: one
#                                                                  quoted argument, design first)
#   PLUGINS="reslab_mix_pre_post" bash bench/run_cards.sh OUT mix-pre-post   (a plugin's design)
#   ARGS="--against pre-ln,post-ln" bash bench/run_cards.sh OUT sas           (options for every card)
# Each card's log and card path are OUT/LABEL.log and OUT/LABEL.path, LABEL being the card's label
# (its design, or the design and its settings: pre-ln+norm-derf), so cards of one design with other
# settings keep their own logs and wall times. A card that fails does not stop the ones after it;
# the script then exits 1 naming each failed card.
set -euo pipefail
# shellcheck source=bench/walls.sh
source "$(dirname "$0")/walls.sh"
out=${1:?usage: bash bench/run_cards.sh OUT DESIGN [DESIGN ...]}
shift
scale=${SCALE:-cpu}
require_reslab run_cards.sh
plugins=()
for m in ${PLUGINS:-}; do plugins+=(--plugin "$m"); done
mkdir -p "$out"
failed=()
for card in "$@"; do
  start=$(date +%s)
  running="$out/running-$$"
  read -ra words <<< "$card"  # the design and its settings, split on spaces, never globbed
  # shellcheck disable=SC2086
  reslab "${plugins[@]}" assess "${words[@]}" --scale "$scale" --store "$out/store" ${ARGS:-} \
    2> "$running.log" | tail -1 > "$running.path" || failed+=("$card")
  # The label is the card folder's name less "-SCALE"; a card that failed before writing one is
  # named by its argument, spaces, '=' and '/' spelled '_'.
  folder=$(cat "$running.path")
  label=$(basename "$folder")
  label=${label%-"$scale"}
  if [ -z "$folder" ] || [ ! -d "$folder" ]; then label=$(printf '%s' "$card" | tr ' =/' '___'); fi
  mv "$running.log" "$out/$label.log"
  mv "$running.path" "$out/$label.path"
  record_wall "$out" "$label" "$start" "$scale"
  tail -n 20 "$out/$label.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  printf -v names '"%s" ' "${failed[@]}"
  echo "run_cards.sh: ${#failed[@]} of $# cards failed: ${names% } (their logs: $out/LABEL.log)" >&2
  exit 1
fi
