#!/usr/bin/env bash
# One device call (2026-12-01, issue 22): the cells where rl-triton's device time is lower
# (V-trace 4096x128; GAE, eligibility traces, episodic sums and Retrace at 128x1024; Retrace
# 16384x64), swept over stream tiles of 256-2048 elements on 1, 2 or 4 warps.
#   OUT=/some/dir bash bench/dev/small_shapes_session.sh
#   OUT=/some/dir CASES_SPEC="--algos gae --shapes 4096x128;--algos vtrace --shapes 32768x16" TILES=256,512 bash ...
#   EXTRA="--dtype bf16": further sweep.py arguments for every case
set -u
export PYTHONPATH=.
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
W=/tmp/small_shapes; mkdir -p "$W"
COMMON="--graph --sets --warps ${WARPS:-1,2,4} --tiles ${TILES:-256,512,1024,2048} ${EXTRA:-}"
CASES=("--algos vtrace --shapes 4096x128,128x1024"
       "--algos gae,eligibility_traces,episodic_prefix_sum --shapes 128x1024"
       "--algos retrace --shapes 128x1024,16384x64")
if [[ -n ${CASES_SPEC:-} ]]; then IFS=';' read -r -a CASES <<< "$CASES_SPEC"; fi
PARTS=${PARTS:-3}
i=0
for c in "${CASES[@]}"; do
  for p in $(seq 0 $((PARTS - 1))); do
    timeout 200 python3 bench/dev/sweep.py --out "$W/c$i" --compile-only --part "$p/$PARTS" $COMMON $c > "$W/c$i-$p.log" 2>&1 &
  done
  i=$((i + 1))
done
wait
echo "compiled at $(date +%T)"
i=0
for c in "${CASES[@]}"; do
  timeout "${CASE_TIMEOUT:-150}" python3 bench/dev/sweep.py --out "$OUT/s$i" $COMMON $c \
    --time-budget "${CASE_BUDGET:-130}" > "$OUT/s$i.txt" 2>&1
  tail -n 8 "$OUT/s$i.txt"
  i=$((i + 1))
done
