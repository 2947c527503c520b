#!/usr/bin/env bash
# One device call (2026-12-01, issue 22): time-major tiles whose rows fill the lanes of 1 or 2
# warps (sweep.py --tm-lanes), the rows layout's defaults beside them, and a bf16 tile sweep.
#   OUT=/some/dir bash bench/dev/tm_lanes_session.sh
# Compiles every candidate first, side by side (one process per case), then times alone.
set -u
export PYTHONPATH=.
OUT=${OUT:?set OUT}
W=/tmp/tm_lanes; mkdir -p "$W"
SHAPES=${SHAPES:-16384x1024,4096x128,1024x1024,64x65536}
ALGOS=${ALGOS:-gae,vtrace,discounted_returns}
A1="--layout time-major --graph --sets --tm-lanes --tm-lanes-steps ${STEPS:-4,8,16,32} --algos $ALGOS --shapes $SHAPES"
A0="--layout rows --graph --sets --families none --algos $ALGOS --shapes $SHAPES"
A2="--dtype bf16 --graph --sets --tiles 1024,2048,4096 --algos ${BF16_ALGOS:-gae,vtrace,discounted_returns,eligibility_traces,masked_gae} --shapes 16384x1024"
n1=$(( $(echo "$ALGOS" | tr ',' '\n' | wc -l) * $(echo "$SHAPES" | tr ',' '\n' | wc -l) ))
for i in $(seq 0 $((n1 - 1))); do
  timeout 240 python3 bench/dev/sweep.py --out "$W/c1" --compile-only --part "$i/$n1" $A1 > "$W/c1-$i.log" 2>&1 &
done
for i in 0 1 2 3 4; do
  timeout 240 python3 bench/dev/sweep.py --out "$W/c2" --compile-only --part "$i/5" $A2 > "$W/c2-$i.log" 2>&1 &
done
wait
echo "compiled at $(date +%T)"
timeout 60 python3 bench/dev/sweep.py --out "$OUT/rows" $A0 > "$OUT/rows.txt" 2>&1
timeout "${LANES_TIMEOUT:-230}" python3 bench/dev/sweep.py --out "$OUT/lanes" $A1 --time-budget "${LANES_BUDGET:-210}" > "$OUT/lanes.txt" 2>&1
timeout 110 python3 bench/dev/sweep.py --out "$OUT/bf16" $A2 --time-budget 95 > "$OUT/bf16.txt" 2>&1
tail -n 3 "$W"/c1-0.log
cat "$OUT/rows.txt"; tail -n 20 "$OUT/lanes.txt"; tail -n 8 "$OUT/bf16.txt"
