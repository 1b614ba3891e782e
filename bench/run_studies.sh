#!/usr/bin/env bash
# Run every built-in study at tiny scale, one after another, into OUT/store, and record each
# study's wall time in OUT/walls.tsv. The README's study results come from this script.
#   bash bench/run_studies.sh OUT [study ...]
set -euo pipefail
out=${1:?usage: bash bench/run_studies.sh OUT [study ...]}
shift
studies=("$@")
if [ ${#studies[@]} -eq 0 ]; then
  mapfile -t studies < <(reslab study list | grep -v '^ ')
fi
mkdir -p "$out"
for name in "${studies[@]}"; do
  start=$(date +%s)
  reslab study run "$name" --scale tiny --store "$out/store" 2> "$out/$name.log" | tail -1 > "$out/$name.path" || true
  end=$(date +%s)
  printf '%s\t%s\t%s\n' "$name" "$((end - start))" "$(date -u +%Y-%m-%dT%H:%MZ)" >> "$out/walls.tsv"
  tail -n 25 "$out/$name.log"
done
