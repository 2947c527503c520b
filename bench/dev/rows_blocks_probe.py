"""Probe (issue 19): GAE over [N, T] rows, each row scanned in turn (the row kernels' loop),
against blocks of B rows scanned together with the rows innermost: transposed into [T, B]
buffers first (``blk``), or read in place at stride T (``blkg``). Hand loops, float32,
``time.thread_time()``, outputs checked against the row loop.

    N=4096 T=128 python bench/dev/rows_blocks_probe.py

Found (2026-12-01, bench/CPU.md): both block forms are slower than the row loop (1.18-1.57 and
2.2-2.9 ms against 1.06-1.19 at 4096 x 128).
"""
import numba as nb, numpy as np, time, os
K = dict(cache=False, nogil=True, fastmath={"contract"}, error_model="numpy")

@nb.njit(**K)
def rows(r, v, d, lv, g, lam, adv, ret):
    N, T = r.shape
    for i in range(N - 1, -1, -1):
        A = np.float32(0.0)
        for t in range(T - 1, -1, -1):
            nv = lv[i] if t == T - 1 else v[i, t + 1]
            nd = np.float32(1.0) - np.float32(d[i, t])
            A = r[i, t] - v[i, t] + g * nd * nv + g * lam * nd * A
            adv[i, t] = A
            ret[i, t] = A + v[i, t]

@nb.njit(**K)
def blk(r, v, d, lv, g, lam, adv, ret, B):
    N, T = r.shape
    br = np.empty((T + 1, B), np.float32)
    bv = np.empty((T + 1, B), np.float32)
    bd = np.empty((T, B), np.float32)
    ba = np.empty((T, B), np.float32)
    bA = np.empty(B, np.float32)
    for i0 in range(0, N, B):
        n = min(B, N - i0)
        for j in range(n):
            for t in range(T):
                br[t, j] = r[i0 + j, t]
                bv[t, j] = v[i0 + j, t]
                bd[t, j] = np.float32(1.0) - np.float32(d[i0 + j, t])
            bv[T, j] = lv[i0 + j]
            bA[j] = 0.0
        for t in range(T - 1, -1, -1):
            rr = br[t]; vv = bv[t]; vn = bv[t + 1]; dd = bd[t]; aa = ba[t]
            for j in range(n):
                A = rr[j] - vv[j] + g * dd[j] * vn[j] + g * lam * dd[j] * bA[j]
                bA[j] = A
                aa[j] = A
        for j in range(n):
            for t in range(T):
                A = ba[t, j]
                adv[i0 + j, t] = A
                ret[i0 + j, t] = A + bv[t, j]

N, T = int(os.environ.get("N", 4096)), int(os.environ.get("T", 128))
rng = np.random.default_rng(0)
r = rng.standard_normal((N, T)).astype(np.float32)
v = rng.standard_normal((N, T)).astype(np.float32)
d = rng.random((N, T)) < 0.05
lv = rng.standard_normal(N).astype(np.float32)
g, lam = np.float32(0.99), np.float32(0.95)
a1 = np.empty_like(r); r1 = np.empty_like(r); a2 = np.empty_like(r); r2 = np.empty_like(r)
rows(r, v, d, lv, g, lam, a1, r1)
for B in (8, 16, 32, 64):
    blk(r, v, d, lv, g, lam, a2, r2, B)
    assert np.allclose(a1, a2, atol=1e-4), B
def tm(f, *a):
    ts = []
    for _ in range(15):
        t0 = time.thread_time(); f(*a); ts.append(time.thread_time() - t0)
    return np.median(ts) * 1e3
for rep in range(2):
    print("rows", tm(rows, r, v, d, lv, g, lam, a1, r1))
    for B in (8, 16, 32, 64):
        print("blk", B, tm(blk, r, v, d, lv, g, lam, a2, r2, B))

@nb.njit(**K)
def blkg(r, v, d, lv, g, lam, adv, ret, B):
    N, T = r.shape
    bA = np.empty(B, np.float32)
    for i0 in range(0, N, B):
        n = min(B, N - i0)
        for j in range(n):
            bA[j] = 0.0
        for t in range(T - 1, -1, -1):
            for j in range(n):
                i = i0 + j
                nv = lv[i] if t == T - 1 else v[i, t + 1]
                nd = np.float32(1.0) - np.float32(d[i, t])
                A = r[i, t] - v[i, t] + g * nd * nv + g * lam * nd * bA[j]
                bA[j] = A
                adv[i, t] = A
                ret[i, t] = A + v[i, t]
for B in (8, 16, 64):
    blkg(r, v, d, lv, g, lam, a2, r2, B); assert np.allclose(a1, a2, atol=1e-4)
for rep in range(2):
    print("rows", tm(rows, r, v, d, lv, g, lam, a1, r1))
    for B in (8, 16, 64):
        print("blkg", B, tm(blkg, r, v, d, lv, g, lam, a2, r2, B))
