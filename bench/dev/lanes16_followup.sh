#!/usr/bin/env bash
# The thirty-third round's follow-up, one device call (bench/NOTES.md open question 24): (1) the
# look-back's long time-major tiles as the rule takes them now (16 x 512 lane tiles on 8 warps)
# against the 32 x 256 lane tiles before, in the layout harness, with episodic sums, which the
# sweep left out; (2) lane tiles of 8 rows (four lanes a row) beside 16 and 32 at 4096x128 and
# 2048x128, V-trace among them; (3) where third_party/base_tree holds an older tree (carry it:
# `git archive db184c1 scangen generated templates specs bench/dev pyproject.toml | tar -x -C
# third_party/base_tree`), the PTX digests of both on the device's Triton, compared (the
# thirty-fourth round's helpers were checked on Triton 3.5 and 3.9 only). About 7 minutes; the
# whole GPU suite at the head is a call of its own (OUT=$OUT TEST_WORKERS=12 bash
# bench/dev/gpu_session.sh tests).
#   OUT=/dir bash bench/dev/lanes16_followup.sh
set -u
export PYTHONPATH=$PWD
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
(cd bench/dev && timeout 150 python3 layout_ab.py --out "$OUT" --tag layout-ab-long16 \
  --algos eligibility_traces,episodic_prefix_sum,discounted_returns \
  --shapes 64x65536,256x8192,512x4096 \
  --baseline scangen.runtime.timemajor.TM_LB_LONG_LANE_ROWS=32) > "$OUT/layout-ab-long16.log" 2>&1
CASES="--layout time-major --tm-lanes --tm-lanes-rows 8,16,32 --tm-lanes-steps 64,128 \
--tm-lanes-warps 2,4,8 --families stream --top 5 --set scangen.runtime.launch.LANES_MIN_ROWS=8,\
scangen.runtime.launch.LANES_ROWS_A_WARP=2 --algos vtrace,gae,eligibility_traces \
--shapes 4096x128,2048x128" BUDGETS=60 COMPILE_TIMEOUT=90 OUT="$OUT" \
  timeout 200 bash bench/dev/sweeps_session.sh > /dev/null 2>&1
if [[ -d third_party/base_tree/bench/dev ]]; then
  (cd third_party/base_tree && timeout 150 python3 bench/dev/ptx_digest.py --out "$OUT/ptx-base.json" \
    --jobs 12) > "$OUT/ptx-base.log" 2>&1
  timeout 150 python3 bench/dev/ptx_digest.py --out "$OUT/ptx-head.json" --compare "$OUT/ptx-base.json" \
    --jobs 12 > "$OUT/ptx-digest.txt" 2>&1
fi
