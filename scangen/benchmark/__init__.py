"""scangen's benchmarks: the timing library (``timing``), the baselines written from
shared/SEMANTICS.md (``baselines``: per-step torch loops and the doubling scan; ``numpy_loops``),
the ``scangen bench`` suite (``suite``) and its output (``report``: CSV, table, chart).

The developer benchmarks in ``bench/`` import ``timing`` and the baselines from here.
Nothing is imported until used.
"""
