"""scangen's benchmarks: the library that ``scangen bench`` and the developer benchmarks in
``bench/`` share, and the ``scangen bench`` suite itself.

- ``timing``: check-then-time, interleaved medians, and one call timed two ways (do_bench and
  the host-timed loop beside the empty launch);
- ``floors``: the copy-bandwidth and empty-launch floors, measured in the same process;
- ``checks``: error ratios against the float64 references and oracles, windows of long T;
- ``inputs``: the call without truncations, rows rolled to large shapes, rotated input sets;
- ``meta``: machine, versions and commit; CSV output; fresh child processes;
- ``baselines`` (the doubling scan; ``baselines.LOOPS`` from ``loops``: per-step torch loops)
  and ``numpy_loops`` (SB3-style), written from shared/SEMANTICS.md;
- ``suite`` and ``report``: ``scangen bench`` and its CSV, table and chart;
- ``gpu_tasks`` and ``gpu_report``: the work and the output (bench.json, bench.md, bench.csv)
  of the developer GPU benchmark, ``bench/bench.py``.

Nothing is imported until used.
"""
