#!/usr/bin/env bash
# One device call: the GPU test suite, a launch-configuration sweep and the launch probe.
#   OUT=/some/dir bash bench/gpu_session.sh [tests|sweep|probe ...]   (default: all three)
# Tests and the sweep's compile phase run side by side (compilation is CPU work); the sweep's
# timing phase and the probe run alone afterwards.
set -u
export PYTHONPATH=.
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
what=${*:-tests sweep probe}
SWEEP_ALGOS=${SWEEP_ALGOS:-gae,vtrace,retrace,lambda_returns,episodic_prefix_sum,masked_gae}
SWEEP_ARGS=${SWEEP_ARGS:---variants shift=gather}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; } \
  > "$OUT/env.txt" 2>&1
pids=()
if [[ $what == *tests* ]]; then
  timeout "${TEST_TIMEOUT:-330}" python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py \
    > "$OUT/pytest-gpu.log" 2>&1 &
  pids+=($!)
  timeout "${TEST_TIMEOUT:-330}" python3 -m pytest -q -p no:cacheprovider \
    tests/test_torch_integration.py tests/test_ops.py tests/test_golden.py \
    > "$OUT/pytest-ops.log" 2>&1 &
  pids+=($!)
fi
if [[ $what == *sweep* ]]; then
  for i in 0 1 2 3 4 5 6 7; do
    timeout "${COMPILE_TIMEOUT:-240}" python3 bench/sweep.py --out "$OUT/compile" --compile-only \
      --part $i/8 --algos "$SWEEP_ALGOS" $SWEEP_ARGS > "$OUT/compile-$i.log" 2>&1 &
    pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait "$p"; done
if [[ $what == *sweep* ]]; then
  timeout "${SWEEP_TIMEOUT:-200}" python3 bench/sweep.py --out "$OUT" --algos "$SWEEP_ALGOS" \
    $SWEEP_ARGS --time-budget "${SWEEP_BUDGET:-170}" > "$OUT/sweep.txt" 2>&1
fi
if [[ $what == *probe* ]]; then
  timeout 60 python3 bench/probe_launch.py > "$OUT/probe.txt" 2>&1
fi
for f in "$OUT"/pytest-*.log; do [[ -f $f ]] && { echo "== $f"; tail -n 15 "$f"; }; done
[[ -f $OUT/sweep.txt ]] && { echo "== sweep"; tail -n 60 "$OUT/sweep.txt"; }
[[ -f $OUT/probe.txt ]] && { echo "== probe"; cat "$OUT/probe.txt"; }
exit 0
