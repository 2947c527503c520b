#!/usr/bin/env bash
# One device call: several bench/dev/sweep.py cases, compiled side by side (compilation is CPU
# work, 16 cores on the device), then timed one after the other, alone on the GPU; optionally a
# bench/rltriton.py run after them. Everything lands in $OUT/sweeps.tgz plus one summary file,
# so that the call returns few files (the device tool returns at most 8).
#   OUT=/dir CASES="--algos gae --shapes 4096x128 --dtype bf16;--algos retrace --shapes 16384x64" \
#     COMMON="--graph --sets" BUDGETS="120;60" RLTRITON="--shapes 4096x128 --algos gae" \
#     bash bench/dev/sweeps_session.sh
# CASES: sweep.py arguments of each case, ';'-separated (a case's own --tiles/--warps win over
# COMMON's); BUDGETS: each case's --time-budget in seconds (default 90).
set -u
export PYTHONPATH=.
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
W=${WORK:-/tmp/sweeps_session}; rm -rf "$W"; mkdir -p "$W"
COMMON=${COMMON:---graph --sets}
IFS=';' read -r -a CASE_LIST <<< "${CASES:?set CASES}"
IFS=';' read -r -a BUDGET_LIST <<< "${BUDGETS:-}"
PARTS=${PARTS:-4}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  echo "tree: ${SCANGEN_REV:-unknown}"; } > "$W/env.txt" 2>&1
t0=$(date +%s)
i=0
for c in "${CASE_LIST[@]}"; do
  for p in $(seq 0 $((PARTS - 1))); do
    # shellcheck disable=SC2086
    timeout "${COMPILE_TIMEOUT:-180}" python3 bench/dev/sweep.py --out "$W/c$i" --compile-only \
      --part "$p/$PARTS" $COMMON $c > "$W/compile-$i-$p.log" 2>&1 &
  done
  i=$((i + 1))
done
wait
echo "compiled in $(( $(date +%s) - t0 )) s" | tee -a "$W/env.txt"
i=0
for c in "${CASE_LIST[@]}"; do
  budget=${BUDGET_LIST[$i]:-90}
  echo "== case $i: $c" >> "$W/summary.txt"
  # shellcheck disable=SC2086
  timeout $((budget + 60)) python3 bench/dev/sweep.py --out "$W/s$i" $COMMON $c \
    --time-budget "$budget" > "$W/s$i.txt" 2>&1
  cat "$W/s$i.txt" >> "$W/summary.txt"
  i=$((i + 1))
done
if [[ -n ${RLTRITON:-} ]]; then
  # shellcheck disable=SC2086
  PYTHONPATH=.:third_party/rl-triton/src timeout "${RLTRITON_TIMEOUT:-120}" python3 bench/rltriton.py \
    --out "$W/rltriton" $RLTRITON > "$W/rltriton.log" 2>&1
  { echo "== rltriton: $RLTRITON"; cat "$W/rltriton.log"; } >> "$W/summary.txt"
fi
cat "$W/env.txt" "$W/summary.txt" > "$OUT/summary.txt"
tar -czf "$OUT/sweeps.tgz" -C "$W" .
echo "done in $(( $(date +%s) - t0 )) s"
