"""A/B helper (bench/results/cpu-2026-12-05-e-sigmoid-one-exp.txt): compile a gated recurrence
h = f(gate) * h + x (f: sigmoid or tanh) with this checkout's compiler into CACHE and print the numba
backend's median time of 25 calls on one thread (ms).

    python bench/dev/sigmoid_ab.py sigmoid|tanh CACHE [tm]
"""
import sys, time, statistics, torch, numba
torch.set_num_threads(1); numba.set_num_threads(1)
import scangen
fn_name = sys.argv[1]; cache = sys.argv[2]; tm = len(sys.argv) > 3
op = scangen.compile(f"""
name: gated_{fn_name}
direction: forward
inputs: {{x: float, gate: float}}
scans:
  h: {{update: "{fn_name}(gate) * h + x"}}
outputs: {{h: h}}
""", cache_dir=cache)
g = torch.Generator().manual_seed(0)
N, T = 1024, 1024
x = torch.randn(N, T, generator=g); gate = torch.randn(N, T, generator=g) * 5
if tm:
    x, gate = x.t().contiguous().t(), gate.t().contiguous().t()
for _ in range(3):
    op(x, gate, backend="numba")
ts = []
for _ in range(25):
    t0 = time.thread_time(); op(x, gate, backend="numba"); ts.append(time.thread_time() - t0)
print(f"{statistics.median(ts)*1e3:.3f}")
