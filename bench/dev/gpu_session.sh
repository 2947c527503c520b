#!/usr/bin/env bash
# One device call: the whole test suite on the GPU, a launch-configuration sweep and the launch probe, or
# the full benchmark.
#   OUT=/some/dir bash bench/dev/gpu_session.sh [tests|sweep|probe ...]   (default: the three)
#   OUT=/some/dir bash bench/dev/gpu_session.sh bench                     (bench.py, alone)
# Tests and the sweep's compile phase run side by side (compilation is CPU work); the sweep's
# timing phase and the probe run alone afterwards. Run from the checkout's root.
set -u
export PYTHONPATH=$PWD  # absolute: tests run subprocesses from other folders
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
what=${*:-tests sweep probe}
SWEEP_ALGOS=${SWEEP_ALGOS:-gae,vtrace,retrace,lambda_returns,episodic_prefix_sum,masked_gae}
SWEEP_ARGS=${SWEEP_ARGS:---quick}
WORK=${WORK:-/tmp/gpu_session}  # logs gathered here, then packed into one file under $OUT
mkdir -p "$WORK"
# logs of an earlier call on a machine kept warm would be packed and printed again
rm -f "$WORK"/pytest-*.log "$WORK"/sweep.txt "$WORK"/sweep.json "$WORK"/probe.txt "$WORK"/bench.log
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; } \
  > "$WORK/env.txt" 2>&1
pids=()
# The whole suite on pytest-xdist's workers (the device image has it): about 370 s with 12
# workers alone on 2026-12-03 (bench/results/h200-2026-12-03-w-pytest-gpu-2.log), over 420 s on
# 2026-12-04 (-bn-pytest-gpu-d3e7644.log: a 420 s limit cut its summary line), so keep the
# default limit; beside a sweep's compile phase, fewer workers and the shorter limit.
if [[ $what == tests ]]; then TEST_TIMEOUT=${TEST_TIMEOUT:-560}; TEST_WORKERS=${TEST_WORKERS:-12}; fi
if [[ $what == *tests* ]]; then
  timeout "${TEST_TIMEOUT:-400}" python3 -m pytest -q -n "${TEST_WORKERS:-6}" -p no:cacheprovider -rf \
    --tb=short > "$WORK/pytest-all.log" 2>&1 &
  pids+=($!)
fi
if [[ $what == *sweep* ]]; then
  for i in 0 1 2 3 4 5 6 7; do
    timeout "${COMPILE_TIMEOUT:-240}" python3 bench/dev/sweep.py --out "$WORK/compile" --compile-only \
      --part $i/8 --algos "$SWEEP_ALGOS" $SWEEP_ARGS > "$WORK/compile-$i.log" 2>&1 &
    pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait "$p"; done
if [[ $what == *sweep* ]]; then
  timeout "${SWEEP_TIMEOUT:-200}" python3 bench/dev/sweep.py --out "$WORK" --algos "$SWEEP_ALGOS" \
    $SWEEP_ARGS --time-budget "${SWEEP_BUDGET:-170}" > "$WORK/sweep.txt" 2>&1
fi
if [[ $what == *bench* ]]; then
  SCANGEN_REV=${SCANGEN_REV:-unknown} timeout "${BENCH_TIMEOUT:-560}" python3 bench/bench.py \
    --out "$OUT" --compile-workers "${COMPILE_WORKERS:-8}" --time-budget "${BENCH_BUDGET:-520}" \
    ${BENCH_ARGS:-} > "$WORK/bench.log" 2>&1
  tail -n 12 "$WORK/bench.log"
fi
if [[ $what == *probe* ]]; then
  timeout 60 python3 bench/dev/probe_launch.py > "$WORK/probe.txt" 2>&1
fi
tar -czf "$OUT/session.tgz" -C "$WORK" .
for f in "$WORK"/pytest-*.log; do
  [[ -f $f ]] && { echo "== $f"; grep -E "^(FAILED|ERROR)|passed|failed" "$f" | tail -n 25; }
done
[[ -f $WORK/sweep.txt ]] && { echo "== sweep"; tail -n 70 "$WORK/sweep.txt"; }
[[ -f $WORK/probe.txt ]] && { echo "== probe"; cat "$WORK/probe.txt"; }
exit 0
