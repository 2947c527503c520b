"""The numba CPU backend's own behaviour: how ``auto`` picks it, what happens without numba,
threads (a call split over threads, several Python threads calling at once), and dtypes.
Its numbers are tested with every other backend's in test_ops.py, test_properties.py and
test_backends_agree.py."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import scangen
from conftest import HAS_NUMBA
from scangen import runtime
from scangen.runtime import numba as numbapath
from scangen.testing.reference import REFERENCES
from scangen.testing import as_time_major, assert_close, make_inputs, time_major_buffers

pytestmark = pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
REPO = Path(__file__).resolve().parent.parent


def test_auto_picks_numba_for_cpu_tensors():
    assert runtime.select_backend("f", None, torch.device("cpu")) == "numba"
    assert runtime.select_backend("f", "torch", torch.device("cpu")) == "torch"


def test_numba_backend_refuses_other_devices():
    with pytest.raises(ValueError, match=r"compute_gae\(\): backend='numba' needs CPU tensors, "
                                         r"got meta tensors"):
        runtime.select_backend("compute_gae", "numba", torch.device("meta"))


WITHOUT_NUMBA = """
import sys
sys.modules["numba"] = None  # as on a machine without numba: importing it fails
import torch, scangen
from scangen import runtime
x = torch.tensor([[1.0, 1.0, 1.0]]); d = torch.tensor([[0, 0, 0]])
print(runtime.select_backend("f", None, torch.device("cpu")))
print(scangen.compute_discounted_returns(x, d, gamma=0.5).tolist())
try:
    scangen.compute_discounted_returns(x, d, backend="numba")
except ValueError as e:
    print(e)
"""


def test_without_numba_auto_takes_the_torch_path():
    out = subprocess.run([sys.executable, "-c", WITHOUT_NUMBA], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines == ["torch", "[[1.75, 1.5, 1.0]]",
                     "compute_discounted_returns(): backend='numba' needs numba installed "
                     "(pip install numba)"]


@pytest.mark.parametrize("layout", ["rows", "time-major"])
def test_a_call_split_over_threads_equals_one_thread(layout, monkeypatch):
    """Rows (or tiles of time-major rows) split over threads compute exactly what one thread
    computes: each row's arithmetic is the same."""
    inputs = make_inputs("compute_vtrace", 37, 300, seed=3)
    kw = {"time_dim": 0} if layout == "time-major" else {}
    if layout == "time-major":
        inputs = {k: v.t().contiguous() if torch.is_tensor(v) and v.dim() == 2 else v
                  for k, v in inputs.items()}
    monkeypatch.setattr(numbapath, "MIN_PARALLEL_STEPS", 1)
    monkeypatch.setattr(numbapath, "THREAD_TRIALS", 0)  # every call on the threads asked for
    monkeypatch.setattr(numbapath, "MAX_TILE_ROWS", 4)  # 10 tiles of rows over 3 threads
    runtime.PLANS.clear()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = scangen.compute_vtrace(**inputs, backend="numba", **kw)
        runtime.PLANS.clear()
        torch.set_num_threads(3)
        many = scangen.compute_vtrace(**inputs, backend="numba", **kw)
    finally:
        torch.set_num_threads(threads)
        runtime.PLANS.clear()
    for a, b in zip(one, many):
        assert torch.equal(a, b)


@pytest.mark.parametrize("faster", [1, 2])
def test_a_plan_keeps_the_faster_thread_count(faster, monkeypatch):
    """After its first call a plan alternates one thread and all of them for THREAD_TRIALS calls
    each, then keeps the count whose calls were faster; every call gives the same answer."""
    monkeypatch.setattr(numbapath, "MIN_PARALLEL_STEPS", 1)
    monkeypatch.setattr(numbapath, "THREAD_TRIALS", 2)
    clock = {"t": 0.0, "threads": None}
    split = numbapath._Plan.split

    def spy_split(self, threads):
        clock["threads"] = threads
        return split(self, threads)

    def fake_clock():  # each call lasts 1 s on the faster count, 2 s on the other
        clock["t"] += 0.5 if clock["threads"] == faster else 1.0
        return clock["t"]

    monkeypatch.setattr(numbapath._Plan, "split", spy_split)
    monkeypatch.setattr(numbapath.time, "perf_counter", fake_clock)
    inputs = make_inputs("compute_gae", 16, 64, seed=0)
    runtime.PLANS.clear()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        first = scangen.compute_gae(**inputs, backend="numba")
        used = []
        for _ in range(8):
            out = scangen.compute_gae(**inputs, backend="numba")
            used.append(clock["threads"])
            for a, b in zip(first, out):
                assert torch.equal(a, b)
    finally:
        torch.set_num_threads(threads)
        runtime.PLANS.clear()
    assert sorted(used[:4]) == [1, 1, 2, 2]  # the trials: two calls on each count
    assert used[4:] == [faster] * 4


def test_several_python_threads_at_once():
    """Calls from several threads share the pool and each gets its own right answer."""
    cases = [make_inputs("compute_gae", 64, 700, seed=s) for s in range(6)]
    expected = [REFERENCES["compute_gae"](**c) for c in cases]
    got, errors = [None] * len(cases), []

    def work(k):
        try:
            for _ in range(3):
                got[k] = scangen.compute_gae(**cases[k], backend="numba")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k, (g, e) in enumerate(zip(got, expected)):
        assert_close(g, e, dtype=g.dtype, name=f"thread {k}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_dtypes_written_in_the_input_dtype(dtype):
    inputs = make_inputs("compute_masked_gae", 5, 77, seed=4, dtype=dtype)
    adv, ret = scangen.compute_masked_gae(**inputs, gamma=0.99, lambda_=0.9, backend="numba")
    assert adv.dtype == ret.dtype == dtype
    e_adv, e_ret = REFERENCES["compute_masked_gae"](**inputs, gamma=0.99, lambda_=0.9)
    assert_close(adv, e_adv, dtype=dtype, name="advantages")
    assert_close(ret, e_ret, dtype=dtype, name="returns")


FORKED = """
import os, torch, scangen
from scangen.runtime import numba as numbapath
numbapath.MIN_PARALLEL_STEPS = 1
torch.set_num_threads(2)
x = torch.randn(8, 64); d = torch.rand(8, 64) < 0.1
want = scangen.compute_discounted_returns(x, d, backend="numba")  # the pool now exists
pid = os.fork()
if pid == 0:  # the child inherits the pool without its threads
    got = scangen.compute_discounted_returns(x, d, backend="numba")
    os._exit(0 if torch.equal(got, want) else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_thread_pool():
    """A call split over threads in a forked child (a DataLoader worker, a subprocess env)
    must not wait forever on the parent's pool, whose threads the child does not have."""
    out = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "0"


def _exp_wide(x, dtype):
    """(exp of ``x`` in extended precision where the platform has it (x86's 80-bit long double:
    libm's expl), the same rounded to ``dtype``): the reference of the exp tests. NumPy's own
    float64 exp is not one: NumPy 1.26's (AVX-512) is 2 ulp off at some inputs where 2.x's is
    not."""
    import numpy as np
    wide = np.longdouble if np.finfo(np.longdouble).nmant > 52 else np.float64
    with np.errstate(over="ignore"):
        exact = np.exp(np.asarray(x).astype(wide))
        return exact, exact.astype(dtype)


def test_the_kernels_exp_is_libms_within_one_ulp():
    """``_nk.exp`` (arithmetic, so that loops with an exp vectorise) against the exact exp: within
    1 ulp of every normal result, and exactly libm's inf, 0, subnormal and NaN cases."""
    import numba
    import numpy as np
    from scangen.runtime import numba_kernels as nk

    @numba.njit
    def apply(a, out):
        for i in range(a.size):
            out[i] = nk.exp(a[i])

    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, 1e-300, -1e-300, 709.78, 709.79, 710.0, 1e308, -708.4, -720.0, -745.1,
             -745.2, -1e308, np.inf, -np.inf, np.nan, 0.5 * np.log(2), -0.5 * np.log(2)]
    x = np.concatenate([rng.uniform(-40, 40, 200_000), rng.uniform(-760, 720, 50_000), edges])
    got = np.empty_like(x)
    apply(x, got)
    exact, want = _exp_wide(x, np.float64)
    normal = np.isfinite(want) & (want >= np.finfo(np.float64).tiny)
    ulps = np.abs(got[normal] - exact[normal]) / np.spacing(want[normal])
    assert ulps.max() <= 1.0
    rest = ~normal
    assert np.all(np.isnan(got[rest]) == np.isnan(want[rest]))
    finite = rest & ~np.isnan(want)
    # inf, 0 and subnormals: the same, or within one step of the smallest subnormal
    same = got[finite] == want[finite]
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: those are `same`
        near = np.abs(got[finite] - want[finite]) <= 5e-324
    assert np.all(same | near)


def test_the_kernels_float32_exp_is_within_one_ulp():
    """``_nk.exp32`` (float32 arithmetic, for the float32 kernels' vectorised loops) against
    the correctly rounded exp: within 1 ulp everywhere, normal or subnormal, and the same inf,
    0 and NaN; ``_nk.exp_as`` takes it for float32 and the float64 exp otherwise."""
    import numba
    import numpy as np
    from scangen.runtime import numba_kernels as nk

    @numba.njit
    def apply(a, out, F):
        for i in range(a.size):
            out[i] = nk.exp_as(a[i], F)

    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, 88.72, 88.73, 89.0, 1e30, -87.33, -103.2, -103.9, -104.0, -150.0,
             -1e30, np.inf, -np.inf, np.nan, 0.5 * np.log(2), -0.5 * np.log(2)]
    x = np.concatenate([np.linspace(-110, 95, 400_001), rng.normal(0, 3, 200_000),
                        edges]).astype(np.float32)
    got = np.empty_like(x)
    apply(x, got, np.float32)
    want = _exp_wide(x, np.float32)[1]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    ulps = np.abs(got[finite].view(np.int32).astype(np.int64)
                  - want[finite].view(np.int32).astype(np.int64))
    assert ulps.max() <= 1
    wide = np.empty(x.size, np.float64)
    apply(x.astype(np.float64), wide, np.float64)  # float64 kernels: the float64 exp
    exact64, want64 = _exp_wide(x[finite].astype(np.float64), np.float64)
    normal = want64 >= np.finfo(np.float64).tiny
    assert (np.abs(wide[finite] - exact64)[normal] <= np.spacing(want64[normal])).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vtraces_row_kernel_computes_its_ratios_ahead(dtype):
    """V-trace's row kernel computes exp(log_pi_target - log_pi_behavior) for a whole row in a
    vectorised loop before scanning it (render_numba._hoistable); its results match the float64
    reference on clean rows and the torch path everywhere, with NaN and inf in the
    log-probabilities of two rows kept in those rows."""
    import inspect

    from generated import vtrace_numba
    assert "_hb_" in inspect.getsource(vtrace_numba._rows)  # the hoisted buffer
    inputs = make_inputs("compute_vtrace", 9, 700, seed=5, dtype=dtype)
    inputs["log_pi_target"][2, 100] = float("nan")
    inputs["log_pi_behavior"][4, 650] = float("inf")
    got = scangen.compute_vtrace(**inputs, backend="numba")
    clean = [0, 1, 3, 5, 6, 7, 8]
    want = REFERENCES["compute_vtrace"](**{k: v[clean] if torch.is_tensor(v) else v
                                           for k, v in inputs.items()})
    for g, w, t in zip(got, want, scangen.compute_vtrace(**inputs, backend="torch")):
        assert_close(g[clean], w, dtype=dtype)
        assert_close(g, t, dtype=dtype)  # NaN and inf where the torch path has them
        assert torch.isnan(g[2, :101]).any()


@pytest.mark.parametrize("name", ["compute_gae", "compute_retrace"])
def test_a_time_major_view_of_n_by_t_runs_the_time_major_kernel(name):
    """``[N, T]`` arguments stored time-major (``x.t()`` of ``[T, N]`` buffers, time_dim=-1)
    run the time-major kernel, as ``[T, N]`` with time_dim=0 does: their rows are adjacent in
    memory. The row kernel over such rows reads memory with stride N (10x slower: V-trace
    1024 x 1024 36 against 2.9 ms)."""
    inputs = make_inputs(name, 40, 64, seed=2)
    # [N, T(, K)] values over [T, N(, K)] storage
    stored = as_time_major(inputs)
    runtime.PLANS.clear()
    got = getattr(scangen, name)(**stored, backend="numba")
    got = got if isinstance(got, tuple) else (got,)
    plans = [p.lp.numba for p in runtime.PLANS.values() if p.lp.numba is not None]
    assert [p.kernel.py_func.__name__ for p in plans] == ["_tmajor"]
    assert got[0].stride() == stored["rewards"].stride()  # outputs in the inputs' layout
    want = REFERENCES[name](**inputs)
    for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
        assert_close(g, w, dtype=torch.float32)
    runtime.PLANS.clear()


WARM_CHILD = """
import sys, torch, scangen
from numba.core import cpu
loads = []
full = cpu.CPUContext.load_additional_registries
def counted(self):
    loads.append(1)
    return full(self)
cpu.CPUContext.load_additional_registries = counted
kw, want = torch.load(sys.argv[1], weights_only=True)
got = scangen.compute_vtrace(**kw, backend="numba")
print(len(loads), all(torch.equal(a, b) for a, b in zip(got, want)))
"""


@pytest.mark.parametrize("layout", ["rows", "time-major"])
def test_a_second_process_loads_cached_kernels_without_numbas_full_refresh(layout, tmp_path):
    """A fresh process whose kernels are in numba's cache loads them without importing every
    lowering module numba has (runtime.numba._light_cache_loads: 0.35 s of a first call), and
    computes what this process computes."""
    kw = make_inputs("compute_vtrace", 6, 40, seed=3, dtype=torch.float32)
    if layout == "time-major":
        kw = time_major_buffers(kw)
        kw["time_dim"] = 0
    want = scangen.compute_vtrace(**kw, backend="numba")  # compiled, or loaded, and cached
    torch.save((kw, want), tmp_path / "call.pt")
    out = subprocess.run([sys.executable, "-c", WARM_CHILD, str(tmp_path / "call.pt")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["0", "True"]


def test_a_kernel_missing_from_the_cache_still_compiles_in_a_fresh_process(tmp_path):
    """The light loader misses (an empty cache directory), so numba's own loader refreshes
    and compiles: the answer is the same."""
    kw = make_inputs("compute_vtrace", 6, 40, seed=3, dtype=torch.float32)
    want = scangen.compute_vtrace(**kw, backend="numba")
    torch.save((kw, want), tmp_path / "call.pt")
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path / "empty")}
    out = subprocess.run([sys.executable, "-c", WARM_CHILD, str(tmp_path / "call.pt")],
                         capture_output=True, text=True, cwd=REPO, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    loads, same = out.stdout.split()
    assert int(loads) >= 1 and same == "True"


# ---------------------------------------------------------------------------------------------
# The row kernel's groups of rows and chunks of steps (scangen.compiler.render_numba._phased)


@pytest.mark.parametrize("chunk", [1, 5, numbapath.ROW_CHUNK], ids=lambda c: f"chunk{c}")
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_row_groups_and_chunks_match_the_reference(name, chunk, monkeypatch):
    """9 rows (two groups of four, one row left over) of 37 steps, in chunks of 1, 5 (a chunk
    boundary inside every row, a short last chunk) and the default (one chunk), both flags
    frequent: every output of every algorithm matches its float64 reference, and a NaN in one
    row of a group stays in that row."""
    monkeypatch.setattr(numbapath, "ROW_CHUNK", chunk)
    inputs = make_inputs(name, 9, 37, seed=11, term_rate=0.2, trunc_rate=0.2)
    if "response_mask" in inputs:  # a step masked GAE consumes (a skipped step's NaN is ignored)
        inputs["response_mask"][5, 17] = True
    want = REFERENCES[name](**inputs)
    got = getattr(scangen, name)(**inputs, backend="numba")
    got, want = (x if isinstance(x, tuple) else (x,) for x in (got, want))
    for g, w in zip(got, want):
        assert_close(g, w, dtype=torch.float32, name=f"{name} chunk {chunk}")
    key = next(k for k, v in inputs.items() if torch.is_tensor(v) and v.dim() == 2
               and v.is_floating_point())
    poisoned = dict(inputs)
    poisoned[key] = inputs[key].clone()
    poisoned[key][5, 17] = float("nan")  # row 5: the second group's second row
    got = getattr(scangen, name)(**poisoned, backend="numba")
    got = got if isinstance(got, tuple) else (got,)
    rows = [r for r in range(9) if r != 5]
    for g, w in zip(got, want):
        assert_close(g[rows], w[rows], dtype=torch.float32, name=f"{name} NaN in row 5")
    assert any(torch.isnan(g[5]).any() for g in got), name


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_gradcheck_row_groups_and_chunks(name, monkeypatch):
    """The backward kernels' groups and chunks: float64 gradcheck over 5 rows (a group of
    four, one left over) of 6 steps in chunks of 4."""
    monkeypatch.setattr(numbapath, "ROW_CHUNK", 4)
    inputs = make_inputs(name, 5, 6, seed=12, dtype=torch.float64)
    names = [k for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()]
    fn = getattr(scangen, name)

    def f(*tensors):
        out = fn(**{**inputs, **dict(zip(names, tensors))}, backend="numba")
        return out if isinstance(out, tuple) else (out,)
    leaves = [inputs[k].clone().requires_grad_(True) for k in names]
    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("layout", ["rows", "time-major"])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_no_array_a_kernel_writes_shares_memory_with_another_argument(name, layout, monkeypatch):
    """The kernels are compiled with every array argument ``noalias``
    (``numba_kernels.NoAliasCompiler``): LLVM may then reorder a store through one argument
    around a load through another. That is only right while no array a kernel writes (an
    output, or the scratch of an output not asked for) overlaps any other argument; inputs may
    share memory with each other (here one tensor passed as two inputs), as they are only
    read. Every call of the forward and backward kernels is checked."""
    checked = []
    arrays_of = numbapath._Plan.arrays

    def arrays(plan, c):
        out, widened = arrays_of(plan, c)
        written = [k for k, (kind, what, *_) in enumerate(plan.sources)
                   if kind == "out" or (kind == "const" and isinstance(what, np.ndarray)
                                        and what.size and plan.time_major)]
        assert written
        for k in written:
            for j, other in enumerate(out):
                if j != k and isinstance(other, np.ndarray):
                    assert not np.shares_memory(out[k], other), (plan.sources[k][1], j)
        checked.append(plan)
        return out, widened

    monkeypatch.setattr(numbapath._Plan, "arrays", arrays)
    inputs = make_inputs(name, 6, 9, seed=4, dtype=torch.float64)
    kw = {}
    if layout == "time-major":  # [T, N] and [T, N, K] storage, time_dim=0
        inputs = time_major_buffers(inputs)
        kw = {"time_dim": 0}
    floats = [k for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()
              and v.dim() == 2]
    shared = floats[:2] if len(floats) >= 2 else []
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items() if k in floats}
    if shared:  # one tensor for two inputs: shared memory that is only read
        leaves[shared[1]] = leaves[shared[0]]
    out = getattr(scangen, name)(**{**inputs, **leaves}, backend="numba", **kw)
    out = out if isinstance(out, tuple) else (out,)
    sum(o.sum() for o in out).backward()
    # the forward call and the backward one (Retrace has no generated backward: one call)
    assert len(checked) >= (2 if name != "compute_retrace" else 1)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_gradchecktime_major_buffers(name):
    """The backward kernels over time-major buffers (`_tmajor` of the `_grad_numba` modules,
    whose rows carry the neighbour step's values as the row kernels do): float64 gradcheck of
    `[T, N]` inputs with `time_dim=0`."""
    inputs = make_inputs(name, 5, 6, seed=13, dtype=torch.float64)
    inputs = time_major_buffers(inputs)
    names = [k for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()]
    fn = getattr(scangen, name)

    def f(*tensors):
        out = fn(**{**inputs, **dict(zip(names, tensors))}, backend="numba", time_dim=0)
        return out if isinstance(out, tuple) else (out,)
    leaves = [inputs[k].clone().requires_grad_(True) for k in names]
    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name,layout", [("compute_gae", "rows"), ("compute_gae", "time-major"),
                                         ("compute_gae", "view"), ("compute_retrace", "rows"),
                                         ("compute_masked_gae", "time-major")])
def test_the_kernels_arrays_are_views_of_the_calls_tensors(name, layout, monkeypatch):
    """``_Plan.arrays`` builds a contiguous tensor's view with NumPy over the tensor's own
    buffer: the same elements, strides and dtype as torch's view (``_view``), no copy; bool
    flags as uint8; tensors of other layouts (a time-major ``[N, T]`` view) through ``_view``."""
    inputs = make_inputs(name, 6, 40, seed=3)
    if layout == "time-major":
        inputs, kw = time_major_buffers(inputs), {"time_dim": 0}
    elif layout == "view":
        inputs = as_time_major(inputs)
        kw = {}
    else:
        kw = {}
    runtime.PLANS.clear()
    fn = getattr(scangen, name)
    fn(**inputs, **kw, backend="numba")
    seen, arrays_of = [], numbapath._Plan.arrays

    def record(self, c):
        out = arrays_of(self, c)
        seen.append((self, c, out[0]))
        return out
    monkeypatch.setattr(numbapath._Plan, "arrays", record)
    got = fn(**inputs, **kw, backend="numba")  # the plan's second call, on the plan's views
    ((p, c, arrays),) = seen
    direct = 0
    for (kind, what, shape, strides), arr, how in zip(p.sources, arrays, p.direct):
        if kind not in ("tensor", "param", "out"):
            continue
        t = {"tensor": c.tensors, "param": c.params, "out": c.outs}[kind][what]
        want = numbapath._view(t, shape, strides)
        assert (arr.shape, arr.strides, arr.dtype) == (want.shape, want.strides, want.dtype), what
        assert arr.ctypes.data == want.ctypes.data, what  # the tensor's memory, not a copy
        np.testing.assert_array_equal(arr, want)
        direct += t.is_contiguous() and how is not None
    # rows and [T, N] buffers: every tensor NumPy's view; [N, T] views of [T, N]: torch's
    arrays_in = [s for s in p.sources if s[0] in ("tensor", "param", "out")]
    assert direct == (0 if layout == "view" else len(arrays_in))
    want = REFERENCES[name](**(inputs if layout != "time-major" else
                               make_inputs(name, 6, 40, seed=3)))
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert_close(g.transpose(0, 1) if layout == "time-major" else g, w, dtype=torch.float32)
    runtime.PLANS.clear()


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("name,layout,kw", [
    ("compute_gae", "rows", {}), ("compute_gae", "time-major", {}),
    ("compute_vtrace", "rows", {}), ("compute_retrace", "rows", {}),
    ("compute_masked_gae", "time-major", {}), ("compute_discounted_returns", "rows",
                                               {"outputs": "returns"})])
def test_small_calls_take_the_fast_path(name, layout, kw, monkeypatch):
    """From a plan's third call, a call small enough for one thread goes from its arguments
    straight to the numba kernel (``fastpath.build_numba``), the guarded path first: no
    signature is built, and the outputs are those of the general path bit for bit and the
    float64 reference's; a call of another shape misses the guard and takes its own plan."""
    from scangen.runtime import plans
    fn = getattr(scangen, name)
    tm = {"time_dim": 0} if layout == "time-major" else {}

    def args(seed, N=6, T=40):
        x = make_inputs(name, N, T, seed=seed)
        return (time_major_buffers(x) if tm else x), x

    runtime.PLANS.clear()
    for seed in (1, 2):  # the plan's first call, then its second: the fast path built after it
        fn(**args(seed)[0], **tm, **kw, backend="numba")
    (plan,) = runtime.PLANS.values()
    assert plan.lp.fast is not None and plan.lp.guarded is not None
    fn(**args(7)[0], **tm, **kw, backend="numba")  # the third: the fast path, then guarded ones
    signatures = []
    real = plans.signature
    monkeypatch.setattr(plans, "signature", lambda *a: signatures.append(1) or real(*a))
    given, values = args(3)
    fast = fn(**given, **tm, **kw, backend="numba")
    assert signatures == []  # the guarded fast path took it
    runtime.PLANS.clear()  # the general path, a fresh plan
    general = fn(**given, **tm, **kw, backend="numba")
    want = _tuple(REFERENCES[name](**values))
    if "outputs" in kw:
        want = want[:1]
    for f, g, w in zip(_tuple(fast), _tuple(general), want):
        assert torch.equal(f, g)
        assert_close(f.t() if tm else f, w, dtype=f.dtype, name=name)  # [T, N] outputs
    other, values = args(4, N=5, T=24)  # another shape: the guard misses
    got = fn(**other, **tm, **kw, backend="numba")
    assert signatures
    for g, w in zip(_tuple(got), _tuple(REFERENCES[name](**values))):
        assert_close(g.t() if tm else g, w, dtype=g.dtype, name=name)


def test_fast_path_declines_what_it_does_not_cover():
    """Tensor params keep the general path; calls large enough for threads and strided inputs
    take the fast path (the plan's threads, torch's views); an input that requires a gradient,
    under no_grad, misses the guard and still gets the right answer through the signature's fast
    path."""
    runtime.PLANS.clear()
    x = make_inputs("compute_gae", 6, 40, seed=1)
    gamma = torch.full((6, 1), 0.97)
    for _ in range(2):
        scangen.compute_gae(**{**x, "gamma": gamma}, backend="numba")
    (plan,) = runtime.PLANS.values()
    assert plan.lp.fast is None
    runtime.PLANS.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # two threads: the plan times one against two on its calls, the fast path's included
        for seed in range(10):
            big = make_inputs("compute_gae", 64, 2 * numbapath.MIN_PARALLEL_STEPS // 64, seed=seed)
            got = scangen.compute_gae(**big, backend="numba")
    finally:
        torch.set_num_threads(threads)
    (plan,) = runtime.PLANS.values()
    assert plan.lp.fast is not None and plan.lp.numba.best
    assert_close(got, REFERENCES["compute_gae"](**big), dtype=got.dtype, name="gae")
    runtime.PLANS.clear()
    for seed in (3, 4, 5):
        strided = {k: (v[:, ::2] if torch.is_tensor(v) and v.dim() == 2 else v) for k, v in
                   make_inputs("compute_gae", 6, 80, seed=seed).items()}
        got = scangen.compute_gae(**strided, backend="numba")
    assert next(iter(runtime.PLANS.values())).lp.fast is not None
    assert_close(got, REFERENCES["compute_gae"](**strided), dtype=got.dtype, name="gae")
    runtime.PLANS.clear()
    for seed in (1, 2):
        scangen.compute_gae(**make_inputs("compute_gae", 6, 40, seed=seed), backend="numba")
    y = make_inputs("compute_gae", 6, 40, seed=5)
    y["values"].requires_grad_(True)
    with torch.no_grad():
        got = scangen.compute_gae(**y, backend="numba")
    assert_close(got, REFERENCES["compute_gae"](**{k: v.detach() if torch.is_tensor(v) else v
                                                   for k, v in y.items()}),
                 dtype=got.dtype, name="gae")
