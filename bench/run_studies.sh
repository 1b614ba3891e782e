#!/usr/bin/env bash
# Run built-in studies one after another at one scale (default: cpu, each study's default) into
# OUT/store, and record each study's wall time in OUT/walls.tsv (name, seconds, date, scale).
# The README's and docs' study sections are written from OUT by `python bench/study_docs.py OUT`.
#   bash bench/run_studies.sh OUT [study ...]          SCALE=smoke|cpu|paper to choose the scale
set -euo pipefail
out=${1:?usage: bash bench/run_studies.sh OUT [study ...]}
shift
scale=${SCALE:-cpu}
studies=("$@")
if [ ${#studies[@]} -eq 0 ]; then
  mapfile -t studies < <(reslab study list | grep -v '^ ')
fi
mkdir -p "$out"
for name in "${studies[@]}"; do
  start=$(date +%s)
  reslab study run "$name" --scale "$scale" --store "$out/store" 2> "$out/$name.log" | tail -1 > "$out/$name.path" || true
  end=$(date +%s)
  printf '%s\t%s\t%s\t%s\n' "$name" "$((end - start))" "$(date -u +%Y-%m-%dT%H:%MZ)" "$scale" >> "$out/walls.tsv"
  tail -n 30 "$out/$name.log"
done
