"""A/B of the backward numba kernels over time-major buffers (issue 19): a generated
``*_grad_numba.py`` module's ``_tmajor`` against a variant of it.

One forward and backward call of ``compute_<ALGO>`` on ``[T, N]`` inputs (``time_dim=0``)
captures the backward plan's arrays; the plan's kernel and the variant's ``_tmajor`` then run
on them alternately, one thread, timed with ``time.thread_time()``, outputs checked against
each other first. The variant may be an earlier commit's module, compiled without numba's cache:

    git show REV:generated/vtrace_grad_numba.py | sed 's/@_nb.njit(\\*\\*_nk.KERNEL)/@_nb.njit(**{**_nk.KERNEL, "cache": False})/' > /tmp/old.py
    ALGO=vtrace N=1024 T=1024 REPS=11 python bench/dev/numba_grad_ab.py /tmp/old.py

Used for bench/results/cpu-2026-12-02-g-tm-carries-ab.txt.
"""
import os, sys, time, importlib.util, numpy as np, torch, scangen
from scangen import testing
from scangen.runtime import numba as nbp
torch.set_num_threads(1)
algo = os.environ.get("ALGO", "vtrace"); N, T = int(os.environ.get("N", 1024)), int(os.environ.get("T", 1024))
kw = testing.make_inputs(algo, N, T, seed=0, dtype=torch.float32)
kw = testing.time_major_buffers(kw)
names = [k for k, v in kw.items() if torch.is_tensor(v) and v.is_floating_point()]
cap = []
orig = nbp._Plan.arrays
def arrays(plan, c):
    out = orig(plan, c); cap.append((plan, out[0])); return out
nbp._Plan.arrays = arrays
leaves = {k: kw[k].clone().requires_grad_(True) for k in names}
out = getattr(scangen, "compute_" + algo)(**{**kw, **leaves}, backend="numba", time_dim=0)
out = out if isinstance(out, tuple) else (out,)
sum(o.sum() for o in out).backward()
plan, arrs = cap[-1]
assert plan.time_major
_, items, head = plan.split(1)
spec = importlib.util.spec_from_file_location("old", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
kerns = {"new": plan.kernel, "old": m._tmajor}
# a module of before 2026-12-04 (4cedd07) takes its compute type _F itself, not an array _Fz
heads = {k: head if "_Fz" in f.py_func.__code__.co_varnames else (*head[:-1], head[-1].dtype.type)
         for k, f in kerns.items()}
outs = [i for i, s in enumerate(plan.sources) if s[0] == "out"]
res = {}
for k, f in kerns.items():
    for i in outs: arrs[i][...] = np.nan
    f(0, items, *heads[k], *arrs); res[k] = [arrs[i].copy() for i in outs]
for a, b in zip(res["new"], res["old"]):
    assert np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True), np.nanmax(abs(a - b))
ts = {k: [] for k in kerns}
for _ in range(int(os.environ.get("REPS", 11))):
    for k, f in kerns.items():
        t0 = time.thread_time(); f(0, items, *heads[k], *arrs); ts[k].append(time.thread_time() - t0)
print(algo, f"{N}x{T} grad tm", " ".join(f"{k} {np.median(v)*1e3:.3f} ms" for k, v in ts.items()), f"old/new {np.median(ts['old'])/np.median(ts['new']):.2f}x")
