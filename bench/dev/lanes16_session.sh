#!/usr/bin/env bash
# One device call (thirty-third round): time-major lane tiles of 16 rows (two lanes a row, each
# a run of steps: runtime.launch.LANES_MIN_ROWS = 16) beside the rule's and the 32-row lane tiles,
# where the time-major table misses (4096x128: 128 programs of 32 rows, about one an SM; 128x1024
# and 1024x1024: small look-back grids); then the PTX digests on the device's Triton against
# third_party/base_tree (a commit's scangen/, generated/, templates/, bench/dev/).
#   OUT=/dir bash bench/dev/lanes16_session.sh
set -u
export PYTHONPATH=.
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
LANES="--layout time-major --tm-lanes --tm-lanes-rows 16,32 --tm-lanes-warps 2,4 --top 5 \
--set scangen.runtime.launch.LANES_MIN_ROWS=16"
CASES="$LANES --tm-lanes-steps 32,64,128 --algos gae,vtrace,lambda_returns,discounted_returns,\
masked_gae,episodic_prefix_sum,eligibility_traces --shapes 4096x128;\
$LANES --tm-lanes-steps 32,64,128 --algos gae,eligibility_traces,discounted_returns \
--shapes 1024x1024,128x1024" BUDGETS="${BUDGETS:-150;120}" OUT="$OUT" \
  bash bench/dev/sweeps_session.sh
if [[ -d third_party/base_tree ]]; then
  { echo "# PTX digests on the device: $(nvidia-smi --query-gpu=name --format=csv,noheader)," \
      "$(python3 -c 'import torch, triton; print("torch", torch.__version__, "Triton", triton.__version__)')"
    echo "# base: third_party/base_tree; new: this tree"
    (cd third_party/base_tree && timeout 200 python3 bench/dev/ptx_digest.py --out /tmp/base.json \
      --jobs 16 > /dev/null 2>&1)
    timeout 200 python3 bench/dev/ptx_digest.py --out /tmp/new.json --compare /tmp/base.json \
      --jobs 16 2>&1 | tail -3; } > "$OUT/ptx-digest.txt" 2>&1
fi
