#!/usr/bin/env bash
# Run built-in studies one after another at one scale (default: cpu, each study's default) into
# OUT/store, and record each study's wall time in OUT/walls.tsv (name, seconds, date, scale, store):
# the last column is "clean" when the study trained every run it planned and "shared" when it found
# some already finished in the store (they cost it nothing, so its wall time is not a clean store's).
# The README's and docs' study sections are written from OUT by `python bench/study_docs.py OUT`.
# A study that fails does not stop the ones after it; the script then exits 1 naming each failed study.
#   bash bench/run_studies.sh OUT [study ...]          SCALE=smoke|cpu|paper to choose the scale
set -euo pipefail
# shellcheck source=bench/walls.sh
source "$(dirname "$0")/walls.sh"
out=${1:?usage: bash bench/run_studies.sh OUT [study ...]}
shift
scale=${SCALE:-cpu}
require_reslab run_studies.sh
studies=("$@")
if [ ${#studies[@]} -eq 0 ]; then
  mapfile -t studies < <(reslab study list | grep -v '^ ')
fi
mkdir -p "$out"
failed=()
for name in "${studies[@]}"; do
  start=$(date +%s)
  # pipefail: the pipeline fails when the study does, and the next study still runs
  reslab study run "$name" --scale "$scale" --store "$out/store" 2> "$out/$name.log" | tail -1 > "$out/$name.path" \
    || failed+=("$name")
  record_wall "$out" "$name" "$start" "$scale"
  tail -n 30 "$out/$name.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_studies.sh: ${#failed[@]} of ${#studies[@]} studies failed: ${failed[*]} (their logs: $out/NAME.log)" >&2
  exit 1
fi
