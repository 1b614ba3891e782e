# Sourced by run_studies.sh and run_cards.sh. require_reslab SCRIPT: stop with one line (exit 2) when
# `reslab` is not on PATH. record_wall OUT NAME START SCALE appends NAME's wall time
# since START (epoch seconds) to OUT/walls.tsv as "name, seconds, date, scale, clean|shared". "shared":
# its log (OUT/NAME.log) says some runs were already finished in the store ("K already finished", one
# line per sweep stage), so they cost it nothing and its wall time is not a clean store's. WALL_NOTE, if
# set, is a sixth column saying what else ran on the machine meanwhile (e.g. "beside a CI run").
record_wall() {
  local out=$1 name=$2 start=$3 scale=$4 reused state=clean
  # (grep finds nothing in the log of a card that failed before its sweep: that is 0, not an error)
  reused=$( (grep -o '[0-9]* already finished' "$out/$name.log" || true) | awk '{s += $1} END {print s + 0}')
  if [ "$reused" -gt 0 ]; then state=shared; fi
  printf '%s\t%s\t%s\t%s\t%s%s\n' "$name" "$(($(date +%s) - start))" "$(date -u +%Y-%m-%dT%H:%MZ)" "$scale" "$state" \
    "${WALL_NOTE:+$'\t'$WALL_NOTE}" >> "$out/walls.tsv"
}

require_reslab() {
  if ! command -v reslab > /dev/null; then
    echo "$1: reslab is not on PATH (activate the virtual environment it was installed into)" >&2
    exit 2
  fi
}
