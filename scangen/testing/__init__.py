"""What tests, ``scangen verify`` and the benchmarks share: float64 references written from
SEMANTICS.md independently of the compiler (:mod:`.reference`), tolerances, a NaN-aware
comparison and input generators (:mod:`.helpers`), and ``scangen verify`` (:mod:`.verify`)."""
from .helpers import (ALGORITHMS, TOLERANCES, Tolerance, as_time_major, assert_close,
                      compile_case, compile_offline, compile_variant, make_inputs, time_major_buffers, tolerance)

__all__ = ["ALGORITHMS", "TOLERANCES", "Tolerance", "as_time_major", "assert_close",
           "compile_case", "compile_offline", "compile_variant", "make_inputs", "time_major_buffers", "tolerance"]
