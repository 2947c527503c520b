#!/usr/bin/env bash
# One device call for bench/NOTES.md open question 23: on an H200 first the whole time-major table
# at the head (the README's tables are the H200's), then (a) the time-major lane tiles' look-back
# swept at 4096x128, then the rl-triton table if time is left; elsewhere (a), then (b) the
# look-back probe at 128x1024 and 1024x1024 and those cells' layout A/B. LIMIT: seconds in all.
#   OUT=/dir LIMIT=540 bash bench/dev/tm_queue_session.sh    (carry third_party/rl-triton)
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-540}
export PYTHONPATH=$PWD
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu"
t0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
sweep() {
  mkdir -p "$OUT/sw"
  CASES="--layout time-major --tm-lanes --tm-lanes-lb-min-t 128 --top 4 --algos gae,lambda_returns,discounted_returns,masked_gae,episodic_prefix_sum,eligibility_traces --shapes 4096x128" \
    BUDGETS=${SWEEP_BUDGET:-90} COMPILE_TIMEOUT=150 OUT=$OUT/sw bash bench/dev/sweeps_session.sh > "$OUT/sw.log" 2>&1
  grep -E "default|best|^  " "$OUT/sw/summary.txt" | head -40
  echo "sweep done at $(( $(date +%s) - t0 )) s"
}
if [[ $gpu == *H200* ]]; then
  timeout 200 python3 bench/dev/layout_ab.py --out "$OUT" > "$OUT/layout.log" 2>&1; tail -3 "$OUT/layout.log"
  echo "layout done at $(( $(date +%s) - t0 )) s"
  (( $(left) > 280 )) && sweep
  (( $(left) > 200 )) && PYTHONPATH=$PWD:$PWD/third_party/rl-triton/src timeout $(( $(left) - 10 )) \
    python3 bench/rltriton.py --out "$OUT" > "$OUT/rltriton.log" 2>&1 && tail -4 "$OUT/rltriton.log"
else
  (( $(left) > 300 )) && sweep
  (( $(left) > 100 )) && timeout $(( $(left) - 60 )) python3 bench/dev/probe_lookback.py --layout time-major \
    --algos eligibility_traces,gae --shapes 1024x1024,128x1024 --tiles 32x128x4,32x64x4 \
    --variants default,nowait,nowait+nostore > "$OUT/probe.txt" 2>&1; cat "$OUT/probe.txt"
  (( $(left) > 50 )) && timeout $(( $(left) - 5 )) python3 bench/dev/layout_ab.py --algos eligibility_traces,gae \
    --shapes 1024x1024,128x1024,4096x128 --out "$OUT" > "$OUT/layout.log" 2>&1; tail -8 "$OUT/layout.log"
fi
echo "all done at $(( $(date +%s) - t0 )) s"
