#!/usr/bin/env bash
# Every CPU figure in the README, one after another (never two timing jobs at once).
# Usage: bash bench/cpu_figures.sh OUT_DIR      (about 20 minutes on 2 cores)
set -euo pipefail
out=${1:?usage: bench/cpu_figures.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
{ date -u; uname -m; nproc; lscpu | grep "Model name"; python -c "import torch; print('torch', torch.__version__)"; } > "$out/machine.txt"
python bench/bench_designs.py --both --steps 1 --rounds 9 --markdown --json "$out/designs.json" > "$out/designs.md"
python bench/bench_engine.py --markdown --json "$out/engine.json" > "$out/engine.md"
python bench/bench_engine.py --nanogpt-cpu-run --json "$out/nanogpt_cpu.json" --progress off > "$out/nanogpt_cpu.md"
start=$(date +%s.%N)
reslab train --preset tiny --out "$out/tiny-run" --set train.progress=off > "$out/tiny.txt" 2>&1
end=$(date +%s.%N)
echo "tiny preset wall seconds: $(echo "$end - $start" | bc)" >> "$out/tiny.txt"
echo "done" > "$out/DONE"  # the zoo and engine figures finished
# Probes and diagnostics: the whole default probe, and the cost of training diagnostics at the default cadence.
/usr/bin/time -f "probe wall seconds: %e" reslab probe --out "$out/probe-default" > "$out/probe.txt" 2>&1
reslab probe --mode xiong --out "$out/probe-xiong" > "$out/probe_xiong.txt" 2>&1
python bench/bench_diagnostics.py --rounds 2 --json "$out/diagnostics.json" > "$out/diagnostics.md" 2>&1
echo "done" > "$out/DONE4"
# Sweeps: a sweep of 8 runs with one single-threaded worker per core against one worker.
python bench/bench_sweep.py --steps 100 --out "$out/bench_sweep.json" > "$out/bench_sweep.txt" 2>&1
# Stacked seeds: stacked seeds on CPU (4 seeds stacked vs one seed, nanoGPT's CPU shape).
python bench/bench_stacked.py --preset nanogpt-cpu --seeds 4 --steps 100 --device cpu --markdown \
    --json "$out/stacked_cpu.json" > "$out/stacked_cpu.md" 2>/dev/null
# Learned scales, gated residual, hyper-connections and nGPT against pre-ln (measured again in the same run), and their probe.
python bench/bench_designs.py --both --steps 1 --rounds 7 --markdown --json "$out/designs_scaled_hyper_ngpt.json" \
    --designs "reordered-ln,layerscale,gated,hyper-connections,ngpt,pre-ln + dyt,pre-ln + skip & branch scales,pre-ln + value residual,pre-ln + residual attention,hyper-connections (dynamic),hyper-connections (mHC)" \
    > "$out/designs_scaled_hyper_ngpt.md" 2> "$out/designs_scaled_hyper_ngpt.err"
reslab probe --designs pre-ln,reordered-ln,layerscale,gated,hyper-connections,ngpt --out "$out/probe-scaled-hyper-ngpt" \
    > "$out/probe_scaled_hyper_ngpt.txt" 2>&1
