"""A/B of numba kernels (issue 19): the generated kernel of one plan against variant modules.

Each variant is a copy of a generated ``*_numba.py`` module with its ``_rows`` or ``_tmajor``
edited by hand. All run on the same plan's arrays (scangen.runtime.numba), one thread, their
outputs checked against the generated kernel's first, then timed alternately with
``time.thread_time()`` (the thread's CPU time, which other processes on a shared VM barely
move); FLUSH=1 reads 64 MB between calls, so each call finds little of its data in cache.

    ALGO=gae FN=compute_gae N=4096 T=128 REPS=41 [FLUSH=1] [TM=1] [OUTS=advantages,returns] \
        python bench/dev/numba_ab.py variant.py ...

A variant may be a module of an earlier commit (``git show 78a2fe1:generated/gae_numba.py >
/tmp/gae_old.py``): a row kernel without the chunk argument gets the leading arguments without
it. Used for bench/CPU.md's rows "the row's first scanned step peeled" (2026-12-01) and "rows in
groups of four" (2026-12-02).
"""
import os, sys, time, importlib.util, numpy as np, torch
torch.set_num_threads(1)
import scangen
from scangen import testing, runtime
algo = os.environ.get("ALGO", "gae"); N, T = int(os.environ.get("N", 4096)), int(os.environ.get("T", 128))
FN = os.environ.get("FN", "compute_gae")
kw = testing.make_inputs(algo, N, T, seed=0, dtype=torch.float32, **({"A": int(os.environ["A"])} if os.environ.get("A") else {}))
if os.environ.get("TM"):
    kw = testing.as_time_major(kw)
fn = getattr(scangen, FN)
runtime.PLANS.clear()
OUTS = os.environ.get("OUTS")
ref = fn(**kw, backend="numba", **({"outputs": tuple(OUTS.split(","))} if OUTS else {}))
plan = list(runtime.PLANS.values())[-1]
lp = plan.lp.numba
import inspect
sig = inspect.signature(fn)
vals = {k: kw.get(k, p.default) for k, p in sig.parameters.items() if k not in ("time_dim","outputs","backend")}
c = plan.bind(vals)
arrays, _ = lp.arrays(c)
threads, items, head = lp.split(1)
name = "_tmajor" if lp.time_major else "_rows"
kerns = {"gen": lp.kernel}
for p in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location(os.path.basename(p)[:-3], p)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    kerns[os.path.basename(p)] = getattr(m, name)
outs = [i for i, r in enumerate(lp.sources) if r[0] == "out"]
n_args = len(arrays)


def lead(f):
    """The kernel's leading arguments: a row kernel of before 2026-12-02 takes no chunk, and a
    kernel of before 2026-12-04 (4cedd07) its compute type ``_F`` itself, not an array ``_Fz``."""
    params = inspect.signature(f.py_func).parameters
    h = head if "_Fz" in params else (*head[:-1], head[-1].dtype.type)
    return h if len(params) - 2 - n_args == len(h) else h[:3] + h[4:]


res = {}
for k, f in kerns.items():
    for i in outs: arrays[i][...] = np.nan
    f(0, items, *lead(f), *arrays)
    res[k] = [arrays[i].copy() for i in outs]
for k in kerns:
    for a, b in zip(res["gen"], res[k]):
        assert np.array_equal(a, b, equal_nan=True) or np.allclose(a, b, rtol=1e-5, atol=1e-5), (k, np.nanmax(abs(a-b)))
times = {k: [] for k in kerns}
junk = np.ones(16 << 20, np.float32) if os.environ.get("FLUSH") else None
def flush():
    if junk is not None: junk[::16] += 1.0
for _ in range(int(os.environ.get("REPS", 21))):
    for k, f in kerns.items():
        a = lead(f)
        flush(); t0 = time.thread_time(); f(0, items, *a, *arrays); times[k].append(time.thread_time() - t0)
g = np.median(times["gen"])
for k, v in times.items():
    q1, q3 = np.percentile(v, [25, 75]) * 1e3
    print(f"{algo} {N}x{T} {'tm' if lp.time_major else 'rows'} {k}: {np.median(v)*1e3:.3f} ms "
          f"(quartiles {q1:.3f}-{q3:.3f}, min {min(v)*1e3:.3f})  gen/this {g/np.median(v):.2f}x")
