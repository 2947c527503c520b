#!/usr/bin/env python3
"""scangen beside rl-triton 0.1.3 (github.com/simonsays1980/rl-triton), one process, interleaved.

Every algorithm both implement, at shared/PERF.md's shapes, fp32. Per cell: call = the full call
(host + device), back-to-back calls host-timed and synchronised, the empty @triton.jit launch in the
same round-robin; do_bench = triton.testing.do_bench median (L2 flushed before each call); graph =
device time, --graph-calls calls captured in one CUDA graph and replayed, per call. Floors from the
same process: device copy bandwidth (start and end, the better used) and the empty launch. Each
side's floor counts its own bytes in + out. Before timing, both sides are checked against scangen's
float64 reference (a row subset and a time window exact for the scan's direction) and against each
other (every element); a wrong side is reported, not timed; a side that cannot run says why.

Mapping (docs/migration.md): rl-triton takes float32 flags, scangen the same flags as bool
(--sg-flags float32: the same float tensors). No truncations unless --trunc (rl-triton's
truncateds=None path; its Retrace requires the tensor: zeros). GAE / V-trace: last_value. TD(lambda):
rl-triton gets bootstrap_values[:, -1] = next_values[:, -1] (its window end keeps only (1 - lambda_)
of next_values otherwise). Retrace: scangen gets next_action_probs_target = a copy of
action_probs_target (0.1.3 weights Q(s_{t+1}, .) with pi(.|s_t)); rl-triton's advantages at T-1 and
at truncated steps are left out of its checks (q_ret past the window is 0 there, and the next
episode's after a truncation). --trunc: truncations only where not terminated (rl-triton: exclusive),
bootstrap_values zero except at truncations and T-1 (rl-triton adds it elsewhere); TD(lambda):
rl-triton's next_values = the bootstrap there.

  PYTHONPATH=.:third_party/rl-triton python3 bench/rltriton.py --out $OUT          (H200)
  TRITON_INTERPRET=1 python bench/rltriton.py --device cpu --shapes 4x32,2x64 --out /tmp/rlt
"""
import argparse
import importlib
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
SHAPES = "4096x128,128x1024,32768x16,16384x64,1024x1024,16384x1024,256x8192,64x65536,8x262144,1x1048576"
QUICK = "4096x128,16384x64,16384x1024,64x65536"
ALGOS = "gae,vtrace,retrace,lambda_returns,discounted_returns,eligibility_traces,episodic_prefix_sum"
FORWARD = ("eligibility_traces", "episodic_prefix_sum")

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--out", required=True, help="folder for rltriton.csv and rltriton.md (rewritten after each cell)")
p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: Triton interpreted, no graphs")
p.add_argument("--shapes", help=f"NxT,... (default {SHAPES})")
p.add_argument("--quick", action="store_true", help=f"shapes {QUICK}")
p.add_argument("--algos", default=ALGOS)
p.add_argument("--trunc", action="store_true", help="5%% truncations besides the 5%% terminations")
p.add_argument("--sg-flags", default="bool", choices=("bool", "float32"), help="scangen's flag dtype")
p.add_argument("--actions", type=int, default=8, help="Retrace's K")
p.add_argument("--retrace-probs", default="separate", choices=("separate", "shared"),
               help="scangen's Retrace policy inputs: separate [N, T, K] tensors (default), or shared: "
               "action_probs_target = P[:, :-1] and next_action_probs_target = P[:, 1:] of one [N, T + 1, K] "
               "buffer P (a rollout's policy over its T + 1 states), its rows constant in time so that "
               "rl-triton's pi(.|s_t) weighting gives the same numbers and both sides stay checked")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--rounds", type=int, default=3, help="samples per callable (host-timed: 2 more, of 10 ms)")
p.add_argument("--rep-ms", type=float, default=20.0, help="do_bench's rep (its warmup: a quarter of it)")
p.add_argument("--graph-calls", type=int, default=20)
p.add_argument("--ceiling", action="store_true", help="device time of a plain streaming kernel that reads "
               "scangen's input bytes and writes its output bytes (no scan; the best of a few tiles, one block a "
               "program or persistent with the next block's loads pipelined), and of "
               "an empty kernel, both by graph replay beside the two sides: what one kernel launch moving "
               "those bytes can reach at that size")
p.add_argument("--ref-rows", type=int, default=32, help="rows checked against float64")
p.add_argument("--ref-window", type=int, default=2048, help="steps checked against float64")
p.add_argument("--sg-configs", default="", help="device time of scangen with forced launch configs too, "
               "e.g. 1x1024w8s1,1x1024w4s1:persist (BLOCK_N x BLOCK_T, warps, stages[:family]) or default "
               "(the dispatch rule), each with optional /FLAG=0|1 switches of scangen.runtime.launch "
               "(default/ONE_CHUNK_ON=0, default/LEAN=0): graph only")
ARGS = p.parse_args()
if ARGS.device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import scangen  # noqa: E402
from scangen.runtime.tiles import sm_count  # noqa: E402
from scangen.testing import make_inputs, tolerance  # noqa: E402
from scangen.testing.reference import REFERENCES  # noqa: E402

try:
    import rl_triton
except ImportError:  # PYTHONPATH=third_party/rl-triton: the package sits under src/
    sys.path.insert(0, str(ROOT / "third_party" / "rl-triton" / "src"))
    import rl_triton


def _helpers(*names):
    """scangen.benchmark's helpers by name: in timing.py, or in the modules it is being split into."""
    mods = []
    for mod in ("timing", "floors", "meta", "checks", "inputs", "empty_kernels"):
        try:
            mods.append(importlib.import_module("scangen.benchmark." + mod))
        except Exception:  # noqa: BLE001 - not there (yet)
            pass
    return SimpleNamespace(**{n: next((getattr(m, n) for m in mods if hasattr(m, n)), None) for n in names})


timing = _helpers("interleaved", "device_interleaved", "cycling", "captured", "short_error", "CopyFloor", "DeviceCopyFloor",
                  "cache_bytes", "tensor_bytes", "error_ratio", "machine_meta", "write_csv", "empty_launch")
CUDA = ARGS.device == "cuda"
DEV = torch.device(ARGS.device)
SYNC = torch.cuda.synchronize if CUDA else None
TOL = tolerance(torch.float32)
_X = torch.empty(1, device=DEV)
if timing.empty_launch is None:
    @triton.jit
    def _empty(x_ptr, n):
        pass

    timing.empty_launch = lambda x, n: _empty[(1,)](x, n)


def launch():  # the empty-launch floor: an empty @triton.jit kernel (a pointer, an int) from Python
    timing.empty_launch(_X, 1)


@triton.jit
def _stream(src, dst, n_src, n_dst, BLOCK: tl.constexpr):
    """--ceiling: words src[i] read for i < n_src, dst[i] = src[i] + 1 written for i < n_dst (the
    store's mask is a runtime value, so no load is dropped)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + i, mask=i < n_src, other=0)
    tl.store(dst + i, x + 1, mask=i < n_dst)


@triton.jit
def _stream_loop(src, dst, n_src, n_dst, n_blocks, BLOCK: tl.constexpr):
    """--ceiling, persistent: each program takes every num_programs-th block of _stream's, the
    next block's loads pipelined (num_stages) while it stores the current one."""
    for b in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0), num_stages=3):
        i = b * BLOCK + tl.arange(0, BLOCK)  # words < 2**31 (buffers of a few hundred MB)
        x = tl.load(src + i, mask=i < n_src, other=0)
        tl.store(dst + i, x + 1, mask=i < n_dst)


CEILING_TILES = ((1024, 4), (2048, 4), (4096, 8), (8192, 8), (8192, 4), (16384, 8))  # words a program, warps
CEILING_LOOPS = ((2048, 4, 8), (4096, 8, 4))  # persistent: words a block, warps, programs an SM


def ceiling(row, k):
    """--ceiling: {name: [thunks over k buffer sets]}: the streaming kernel per tile moving scangen's
    bytes in and out (one block a program, and persistent), and the empty kernel."""
    n_src = -(-(row["sg_bytes"] - row["sg_out_bytes"]) // 4)
    n_dst = -(-row["sg_out_bytes"] // 4)
    bufs = [(torch.zeros(n_src, dtype=torch.int32, device=DEV), torch.empty(n_dst, dtype=torch.int32, device=DEV))
            for _ in range(k)]
    thunks = {f"map{b}w{w}": [lambda s=s, d=d, b=b, w=w: _stream[(triton.cdiv(max(n_src, n_dst), b),)](
        s, d, n_src, n_dst, BLOCK=b, num_warps=w) for s, d in bufs] for b, w in CEILING_TILES}
    sms = sm_count(DEV) if CUDA else 2  # 2: the interpreter, for checks on the CPU
    for b, w, per_sm in CEILING_LOOPS:
        n_blocks = triton.cdiv(max(n_src, n_dst), b)
        thunks[f"map{b}w{w}x{per_sm}loop"] = [
            lambda s=s, d=d, b=b, w=w, g=min(n_blocks, per_sm * sms), n=n_blocks: _stream_loop[(g,)](
                s, d, n_src, n_dst, n, BLOCK=b, num_warps=w) for s, d in bufs]
    thunks["empty"] = [launch]
    return thunks


def _rt_on_cpu(fn, kw):
    """--device cpu: rl-triton asserts tensor.is_cuda; interpreted, its kernels take CPU tensors."""
    torch.Tensor.is_cuda = property(lambda self: True)
    try:
        return fn(**kw)
    finally:
        del torch.Tensor.is_cuda


def side_fn(side, name, kw):
    fn = getattr(scangen if side == "sg" else rl_triton, "compute_" + name)
    if CUDA:
        return lambda: fn(**kw)
    return (lambda: fn(**kw, backend="triton")) if side == "sg" else (lambda: _rt_on_cpu(fn, kw))


# ---------------------------------------------------------------------------------------------
# inputs: scangen.testing.make_inputs rows (bool flags), both sides' arguments built from them

def master(name, N, T):
    g = min(N, max(1, (1 << 20) // T))  # rows drawn; the others are time-rolled copies
    trunc_rate = 0.05 if ARGS.trunc and name not in FORWARD else 0.0
    kw = make_inputs(name, g, T, seed=ARGS.seed, trunc_rate=trunc_rate, term_rate=0.05, A=ARGS.actions)
    for k, v in kw.items():
        if torch.is_tensor(v):
            v = v.to(DEV)
            if g < N:  # copy j rolled in time by its own shift, the same for every tensor of a row
                v = torch.cat([v if j == 0 or v.dim() < 2 else torch.roll(v, (j * 7919 + 31 * j * j) % T, 1)
                               for j in range(-(-N // g))])[:N]
            kw[k] = v.contiguous()
    return kw


KEYS = {"gae": ("rewards", "values", dict(gamma=0.99, lambda_=0.95)),
        "vtrace": ("log_pi_target", "log_pi_behavior", "values", "rewards",
                   dict(gamma=0.99, rho_bar=1.0, c_bar=1.0)),
        "retrace": ("action_probs_target", "action_probs_behavior", "q_values", "next_q_values_all", "actions",
                    "rewards", dict(gamma=0.99, lambda_=0.95, c_bar=1.0, rho_bar=1.0)),
        "lambda_returns": ("rewards", "next_values", dict(gamma=0.99, lambda_=0.95)),
        "discounted_returns": ("rewards", dict(gamma=0.99))}


def build(name, m):
    """(scangen kwargs, rl-triton kwargs, info): info["part"]: inputs of which only [:, -1] is read
    (counted as [N]); info["excl"]: {output index: mask} left out of rl-triton's checks."""
    info, sgf = {"part": set(), "excl": {}}, (lambda x: x if ARGS.sg_flags == "bool" else x.float())
    if name in FORWARD:
        base = {k: v for k, v in m.items() if k != "dones"}
        return dict(base, dones=sgf(m["dones"])), dict(base, dones=m["dones"].float()), info
    *keys, params = KEYS[name]
    term = m["terminateds"]
    base = dict({k: m[k] for k in keys}, **params)
    sg, rt = dict(base, terminateds=sgf(term)), dict(base, terminateds=term.float())
    if ARGS.trunc:  # no step both terminated and truncated; the bootstrap only where it is read
        trunc = m["truncateds"] & ~term
        at = trunc.clone()
        at[:, -1] = True
        sg["truncateds"], rt["truncateds"] = sgf(trunc), trunc.float()
        if "bootstrap_values" in m:
            sg["bootstrap_values"] = rt["bootstrap_values"] = torch.where(at, m["bootstrap_values"], 0.0)
    if name in ("gae", "vtrace") and not ARGS.trunc:
        sg["last_value"] = rt["last_value"] = m["bootstrap_values"][:, -1].contiguous()
    elif name == "retrace":
        sg["next_action_probs_target"] = m["action_probs_target"].clone()
        if ARGS.retrace_probs == "shared":  # one [N, T + 1, K] buffer, both views of it
            T = m["action_probs_target"].shape[1]
            P = m["action_probs_target"][:, :1].expand(-1, T + 1, -1).contiguous()
            sg["action_probs_target"], sg["next_action_probs_target"] = P[:, :-1], P[:, 1:]
            rt["action_probs_target"] = P[:, :-1].contiguous()
        excl = torch.zeros_like(term)
        excl[:, -1] = True
        if ARGS.trunc:
            excl |= trunc
        else:
            rt["truncateds"] = torch.zeros_like(rt["terminateds"])
        info["excl"] = {1: excl}
    elif name == "lambda_returns":
        if ARGS.trunc:
            rt["next_values"] = torch.where(at, rt["bootstrap_values"], m["next_values"])
        else:
            rt["bootstrap_values"] = torch.zeros_like(m["next_values"])
            rt["bootstrap_values"][:, -1] = m["next_values"][:, -1]
            info["part"] = {"bootstrap_values"}
    elif name == "discounted_returns" and not ARGS.trunc:
        sg["bootstrap_values"] = rt["bootstrap_values"] = m["bootstrap_values"]
        info["part"] = {"bootstrap_values"}
    return sg, rt, info


def io_bytes(kw, outs, part):
    # views that are not contiguous (--retrace-probs shared) count their whole storage, once
    views = {v.untyped_storage().data_ptr(): v.untyped_storage().nbytes() for k, v in kw.items()
             if k not in part and torch.is_tensor(v) and not v.is_contiguous()}
    full = sum(views.values()) + timing.tensor_bytes([v for k, v in kw.items() if k not in part and not (
        torch.is_tensor(v) and not v.is_contiguous())])
    return full + sum(kw[k].shape[0] * kw[k].element_size() for k in part if k in kw) + timing.tensor_bytes(outs)


# ---------------------------------------------------------------------------------------------
# checks

def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def window(x, rows, T, fwd, W):
    if not torch.is_tensor(x) or x.dim() == 0:
        return x
    x = x[rows]
    if x.dim() >= 2 and x.shape[1] == T:
        x = x[:, :W] if fwd else x[:, T - W:]
    return x.cpu()


def errors(actual, expected, excl):
    """(max error / fp32 tolerance as scangen.testing.assert_close (<= 1 passes), max |error|)."""
    if len(actual) != len(expected):
        return math.inf, math.inf
    ratio = diff = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = a.detach().to("cpu", torch.float64), e.detach().to("cpu", torch.float64)
        if i in excl and a.shape == excl[i].shape == e.shape:
            a, e = a.masked_fill(excl[i].cpu(), 0.0), e.masked_fill(excl[i].cpu(), 0.0)
        ratio = max(ratio, timing.error_ratio(a, e, TOL.atol, TOL.rtol))
        d = (a - e).abs() if a.shape == e.shape else torch.tensor([math.inf])
        diff = max(diff, float(d[torch.isfinite(d)].max()) if bool(torch.isfinite(d).any()) else 0.0)
    return ratio, diff


def ref_check(name, sg_kw, outs, info, rows, W):
    """Each side's errors against scangen's float64 reference on ``rows`` and a window of W steps."""
    fwd = name in FORWARD
    T = sg_kw["dones" if fwd else "terminateds"].shape[1]
    ref = as_tuple(REFERENCES["compute_" + name](**{k: window(v, rows, T, fwd, W) for k, v in sg_kw.items()}))
    excl = {"sg": {}, "rt": {i: window(x, rows, T, fwd, W) for i, x in info["excl"].items()}}
    return {s: errors([window(o, rows, T, fwd, W) for o in out], ref, excl[s]) for s, out in outs.items() if out}


# ---------------------------------------------------------------------------------------------
# timing

def capture(thunks):
    """--graph-calls calls, input sets rotated (set 0 last), in one CUDA graph: (graph, set 0's outputs)."""
    graph, last = timing.captured(thunks, ARGS.graph_calls)
    return graph, as_tuple(last)


def copy_bandwidth():
    floor = timing.DeviceCopyFloor(1 << 30, device=DEV) if CUDA else timing.CopyFloor(64 << 20)
    t = (timing.device_interleaved(floor.fns(), rounds=5, warmup_ms=10, rep_ms=50) if CUDA
         else timing.interleaved(floor.fns(), rounds=3))
    bw = floor.bandwidth(t)[0]
    floor.close()
    return bw


def run_cell(name, N, T):
    row = dict(algo=name, N=N, T=T, K=ARGS.actions if name == "retrace" else "", sg_flags=ARGS.sg_flags,
               trunc="-" if name in FORWARD else ("5%" if ARGS.trunc else "0"))
    m = master(name, N, T)
    sg_kw, rt_kw, info = build(name, m)
    kws = {"sg": sg_kw, "rt": rt_kw}
    fns, outs = {s: side_fn(s, name, kw) for s, kw in kws.items()}, {}
    for s, fn in fns.items():  # the first calls, compiles included
        try:
            t0 = time.perf_counter()
            outs[s] = as_tuple(fn())
            if SYNC:
                SYNC()
            row[f"{s}_first_s"], row[f"status_{s}"] = time.perf_counter() - t0, "ok"
            row[f"{s}_bytes"] = io_bytes(kws[s], outs[s], info["part"])
            row[f"{s}_out_bytes"] = timing.tensor_bytes(outs[s])
        except Exception as exc:  # noqa: BLE001 - shape limits, asserts, out of memory: the cell says why
            outs[s], row[f"status_{s}"] = None, "skip: " + timing.short_error(exc, 120)
            if CUDA:
                torch.cuda.empty_cache()
    rows = torch.unique(torch.linspace(0, N - 1, min(N, ARGS.ref_rows)).round().long()).to(DEV)
    for s, (ratio, diff) in ref_check(name, sg_kw, outs, info, rows, min(T, ARGS.ref_window)).items():
        row[f"{s}_ref_x"], row[f"{s}_ref_err"] = ratio, diff
        if ratio > 1:
            row[f"status_{s}"] = f"WRONG (float64 ref: {ratio:.3g} x tol)"
    if outs["sg"] and outs["rt"]:
        row["cross_x"], row["cross_err"] = errors(outs["sg"], outs["rt"], info["excl"])
        if row["cross_x"] > 1 and row["status_sg"] == row["status_rt"] == "ok":
            if T <= 1 << 17:  # who is wrong outside the window: the worst row against float64, all of T
                worst = (outs["sg"][0] - outs["rt"][0]).abs().amax(1).argmax().reshape(1)
                for s, (ratio, _) in ref_check(name, sg_kw, outs, info, worst, T).items():
                    if ratio > 1:
                        row[f"status_{s}"] = f"WRONG (float64 ref, row {int(worst)}: {ratio:.3g} x tol)"
            if row["status_sg"] == row["status_rt"] == "ok":
                row["status_sg"] = row["status_rt"] = f"unverified: the sides differ by {row['cross_x']:.3g} x tol"
    ok = [s for s in ("sg", "rt") if row[f"status_{s}"] == "ok"]
    # input sets (copies), so that back-to-back calls and graph replays find little of their data in L2
    set_bytes = sum(row[f"{s}_bytes"] for s in ok) or 1
    k = max(1, min(16, math.ceil(3 * timing.cache_bytes(DEV) / set_bytes), int(8e9 // set_bytes))) if CUDA else 2
    row["sets"], thunks = k, {s: [fns[s]] for s in ok}
    for _ in range(k - 1):
        copies = build(name, {a: v.clone() if torch.is_tensor(v) else v for a, v in m.items()})
        for s, kw in zip(("sg", "rt"), copies):
            if s in ok:
                thunks[s].append(side_fn(s, name, kw))
    # steady state before timing: a scangen plan's second launch decides its fast path (a few
    # ms), and the calls-per-sample calibration must not take that for a call: it then timed
    # single-call samples (V-trace 64x65536: 199-203 us a call against 39 us)
    for s in ok:
        for th in thunks[s]:
            th()
    if SYNC:
        SYNC()
    fns = {**{s: timing.cycling(thunks[s]) for s in ok}, "launch": launch}
    t = timing.interleaved(fns, rounds=ARGS.rounds + 2, target_s=0.01, sync=SYNC)
    row.update({f"{s}_call_us": t[s].median_s * 1e6 for s in fns})
    if CUDA:
        graphs, notes = {}, []
        for s in ok:
            try:
                graphs[s] = capture(thunks[s])
                fns[s + "_graph"] = graphs[s][0].replay
            except Exception as exc:  # noqa: BLE001
                notes.append(f"{s} graph: {timing.short_error(exc, 80)}")
        if ARGS.ceiling and "sg" in ok:
            for name, th in ceiling(row, k).items():
                for f in th:
                    f()
                fns[name + "_graph"] = capture(th)[0].replay
        t = timing.device_interleaved(fns, rounds=ARGS.rounds, warmup_ms=ARGS.rep_ms / 4, rep_ms=ARGS.rep_ms)
        row.update({f"{s}_bench_us": t[s].median_s * 1e6 for s in (*ok, "launch")})
        if ARGS.ceiling and "sg" in ok:
            maps = {n: t[n].median_s * 1e6 / ARGS.graph_calls for n in t if n.startswith("map")}
            best = min(maps, key=maps.get)
            row["map_graph_us"], row["map_tile"] = maps[best], best.removesuffix("_graph")
            row["map_tiles"] = " ".join(f"{n.removesuffix('_graph')}={v:.3g}" for n, v in maps.items())
            row["empty_graph_us"] = t["empty_graph"].median_s * 1e6 / ARGS.graph_calls
        for s, (_, last) in graphs.items():
            if errors(last, outs[s], {})[0] > 1:
                notes.append(f"{s}: the graph's result differs from the eager call's")
            else:
                row[f"{s}_graph_us"] = t[s + "_graph"].median_s * 1e6 / ARGS.graph_calls
        if "sg" in ok and ARGS.sg_configs:
            forced_configs(row, thunks["sg"], outs["sg"], fns, graphs, notes)
        row["note"] = "; ".join(notes)
    return row


def parse_config(text):
    """'1x1024w8s1[:family][/FLAG=v...]' -> ((block_n, block_t, warps, stages, family) or None for
    'default' (the dispatch rule), {FLAG: int}): FLAG a switch of scangen.runtime.launch
    (LEAN, ONE_CHUNK_ON), set while the config's calls are captured."""
    import re
    head, *flags = text.strip().split("/")
    switches = {}
    for f in flags:
        name, _, v = f.partition("=")
        if not hasattr(scangen.runtime.launch, name) or not v.isdigit():
            raise SystemExit(f"--sg-configs: expected FLAG=0|1 (a switch of scangen.runtime.launch), got {f!r}")
        switches[name] = int(v)
    if head == "default":
        return None, switches
    m = re.fullmatch(r"(\d+)x(\d+)w(\d+)s(\d+)(?::(\w+))?", head)
    if not m:
        raise SystemExit(f"--sg-configs: expected BNxBTwWsS[:family] or default, got {text!r}")
    bn, bt, w, st = (int(v) for v in m.groups()[:4])
    return (bn, bt, w, st, m.group(5) or "stream"), switches


def forced_configs(row, sg_thunks, sg_outs, fns, graphs, notes):
    """--sg-configs: each forced config's calls captured in a graph (plans made under
    scangen.runtime.config.override), replayed interleaved with both sides' graphs."""
    from scangen.runtime import config as sg_config
    from scangen.runtime import tiles as sg_tiles
    extra = {}
    for i, text in enumerate(c for c in ARGS.sg_configs.split(",") if c):
        cfg, switches = parse_config(text)

        def rule(c, cfg=cfg):
            bn, bt, w, st, fam = cfg
            bk = min(sg_tiles.pow2(c.K), sg_config.MAX_BLOCK_K)
            return sg_config.Config(bn, bt, bk, w, fam, st)
        saved = {k: getattr(scangen.runtime.launch, k) for k in switches}
        try:
            for k, v in switches.items():
                setattr(scangen.runtime.launch, k, bool(v))
            with (sg_config.override(rule) if cfg else sg_config.fresh_plans()):
                graph, last = capture(sg_thunks)
                keep = list(scangen.runtime.PLANS.values())  # their look-back workspaces live on
            graph.replay()  # a captured graph's outputs are written by its replays
            torch.cuda.synchronize()
            if errors(last, sg_outs, {})[0] > 1:
                notes.append(f"config {text}: differs from the default's result")
                continue
            extra[f"cfg{i}"] = (text, graph, keep)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"config {text}: {timing.short_error(exc, 80)}")
        finally:
            for k, v in saved.items():
                setattr(scangen.runtime.launch, k, v)
    if not extra:
        return
    gfns = {s + "_graph": g[0].replay for s, g in graphs.items()}
    gfns.update({k: g.replay for k, (_, g, _) in extra.items()})
    t = timing.device_interleaved(gfns, rounds=ARGS.rounds, warmup_ms=ARGS.rep_ms / 4, rep_ms=ARGS.rep_ms)
    for s in graphs:
        row[f"{s}_graph2_us"] = t[s + "_graph"].median_s * 1e6 / ARGS.graph_calls
    row["configs"] = "; ".join(f"{text} {t[k].median_s * 1e6 / ARGS.graph_calls:.3g}"
                               for k, (text, _, _) in extra.items())


def derive(r, bw):
    r["copy_GBps"] = bw / 1e9
    for key in ("call", "bench", "graph"):
        if r.get(f"sg_{key}_us") and r.get(f"rt_{key}_us"):
            r[f"{key}_ratio"] = r[f"rt_{key}_us"] / r[f"sg_{key}_us"]
    for s in ("sg", "rt"):
        if r.get(f"{s}_bytes"):
            r[f"{s}_floor_us"] = r[f"{s}_bytes"] / bw * 1e6
            dev_us = r.get(f"{s}_graph_us") or r.get(f"{s}_bench_us")
            r[f"{s}_pct_floor"] = 100 * r[f"{s}_floor_us"] / dev_us if dev_us else None
    if r.get("map_graph_us") and r.get("sg_floor_us"):
        r["map_pct_floor"] = 100 * r["sg_floor_us"] / r["map_graph_us"]
        if r.get(f"{s}_call_us") and r.get("launch_call_us"):
            r[f"{s}_x_launch"] = r[f"{s}_call_us"] / r["launch_call_us"]


# ---------------------------------------------------------------------------------------------
# output

COLUMNS = ("algo", "N", "T", "K", "trunc", "sg_flags", "status_sg", "status_rt", "sg_ref_x", "sg_ref_err",
           "rt_ref_x", "rt_ref_err", "cross_x", "cross_err", "sg_first_s", "rt_first_s", "sets", "sg_bytes",
           "rt_bytes", "copy_GBps", "launch_call_us", "launch_bench_us", "sg_call_us", "rt_call_us", "call_ratio",
           "sg_bench_us", "rt_bench_us", "bench_ratio", "sg_graph_us", "rt_graph_us", "graph_ratio",
           "sg_floor_us", "rt_floor_us", "sg_pct_floor", "rt_pct_floor", "sg_x_launch", "rt_x_launch", "note",
           "sg_graph2_us", "rt_graph2_us", "configs", "sg_out_bytes", "map_graph_us", "map_tile", "map_pct_floor",
           "map_tiles",
           "empty_graph_us",
           "error")


def fnum(v, fmt="{:.3g}"):
    return "-" if v is None or v == "" else fmt.format(v)


def pair(r, key, fmt="{:.3g}"):
    return f"{fnum(r.get('sg_' + key), fmt)} / {fnum(r.get('rt_' + key), fmt)}"


def check_cell(r):
    if "error" in r:
        return f"cell error: {r['error']}".replace("|", "/")
    parts = [f"{lib} {fnum(r.get(s + '_ref_x'), '{:.2g}')}x tol" if r[f"status_{s}"] == "ok"
             else f"{lib}: {r[f'status_{s}']}" for s, lib in (("sg", "scangen"), ("rt", "rl-triton"))]
    return ("; ".join(parts) + (f" ({r['note']})" if r.get("note") else "")).replace("|", "/")


def md_table(header, cells, rows) -> list:
    """A markdown table's lines: ``header``, then per row of ``rows`` its algo and shape before its
    ``cells``."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + [f"| {r['algo']} | {r['N']}x{r['T']} | " + " | ".join(c) + " |" for r, c in zip(rows, cells)])


def save(out, rows, meta):
    timing.write_csv(out / "rltriton.csv", rows, COLUMNS, meta)
    lines = ["# scangen beside rl-triton", "", *(f"- {k}: {v}" for k, v in meta.items()), "",
             "call: the full call (host + device), host-timed back-to-back; device: one of "
             f"{ARGS.graph_calls} calls captured in a CUDA graph; do_bench: median, L2 flushed; floor: each "
             "side's bytes in + out / copy bandwidth; % floor: of the device time; x: rl-triton / scangen "
             "(> 1: scangen faster); check: max error / fp32 tolerance against float64 (rl-triton's Retrace "
             "advantages at T-1 and truncations left out). Not in rl-triton 0.1.3: compute_masked_gae.", ""]
    lines += md_table(("algo", "N x T", "call us sg / rt", "x", "device us sg / rt", "x", "do_bench us sg / rt",
                       "x", "launch us", "floor us sg / rt", "% floor sg / rt", "check"),
                      [(pair(r, "call_us"), fnum(r.get("call_ratio")), pair(r, "graph_us"),
                        fnum(r.get("graph_ratio")), pair(r, "bench_us"), fnum(r.get("bench_ratio")),
                        fnum(r.get("launch_call_us")), pair(r, "floor_us"), pair(r, "pct_floor", "{:.0f}"),
                        check_cell(r)) for r in rows], rows)
    ceil = [r for r in rows if r.get("map_graph_us")]
    if ceil:
        lines += ["", "Ceiling (--ceiling): device time of one streaming kernel (no scan) that reads scangen's "
                  "input bytes and writes its output bytes, the best of its tiles, and of an empty kernel, "
                  "each one of the calls of a replayed CUDA graph, beside the sides above:", ""]
        lines += md_table(("algo", "N x T", "scangen device us", "streaming kernel us (tile)", "empty kernel us",
                           "floor us", "% floor scangen / streaming kernel"),
                          [(fnum(r.get("sg_graph_us")), f"{fnum(r.get('map_graph_us'))} ({r.get('map_tile')})",
                            fnum(r.get("empty_graph_us")), fnum(r.get("sg_floor_us")),
                            f"{fnum(r.get('sg_pct_floor'), '{:.0f}')} / {fnum(r.get('map_pct_floor'), '{:.0f}')}")
                           for r in ceil], ceil)
    forced = [r for r in rows if r.get("configs")]
    if forced:
        lines += ["", "Forced launch configs (--sg-configs), device us, replayed interleaved with both "
                  "sides' graphs again (sg / rt in that round):", ""]
        lines += [f"- {r['algo']} {r['N']}x{r['T']}: sg {fnum(r.get('sg_graph2_us'))} / rt "
                  f"{fnum(r.get('rt_graph2_us'))}; {r['configs']}" for r in forced]
    (out / "rltriton.md").write_text("\n".join(lines) + "\n")


def main():
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = [tuple(int(v) for v in s.lower().split("x"))
              for s in (ARGS.shapes or (QUICK if ARGS.quick else SHAPES)).split(",") if s]
    algos = [a.removeprefix("compute_") for a in ARGS.algos.split(",") if a]
    t_start = time.perf_counter()
    meta = timing.machine_meta(ROOT, packages=("torch", "triton", "numpy"), device=DEV)
    meta.update({"rl_triton": f"{rl_triton.__version__} ({Path(rl_triton.__file__).parent})",
                 "device": ARGS.device, "L2_bytes": timing.cache_bytes(DEV), "settings": (
                     f"trunc={ARGS.trunc} sg_flags={ARGS.sg_flags} K={ARGS.actions} rounds={ARGS.rounds} "
                     f"rep_ms={ARGS.rep_ms} graph_calls={ARGS.graph_calls} ref={ARGS.ref_rows} rows x "
                     f"{ARGS.ref_window} steps")})
    bw0 = copy_bandwidth()
    meta["copy_GBps"] = f"{bw0 / 1e9:.0f} (start)"
    print(f"copy bandwidth {bw0 / 1e9:.0f} GB/s; {len(algos)} algorithms x {len(shapes)} shapes", flush=True)
    rows = []
    for N, T in shapes:
        for name in algos:
            t0 = time.perf_counter()
            try:
                r = run_cell(name, N, T)
            except Exception as exc:  # noqa: BLE001 - the grid goes on
                r = dict(algo=name, N=N, T=T, error=timing.short_error(exc, 160))
            if CUDA:
                torch.cuda.empty_cache()
            derive(r, bw0)
            rows.append(r)
            save(out, rows, meta)
            print(f"[{time.perf_counter() - t_start:6.1f}s] {name:20s} {N}x{T}: call {pair(r, 'call_us')} us, "
                  f"device {pair(r, 'graph_us')} us, % floor {pair(r, 'pct_floor', '{:.0f}')}; {check_cell(r)} "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)
    bw1 = copy_bandwidth()
    for r in rows:  # floors from the better of the two copy measurements
        derive(r, max(bw0, bw1))
    meta.update(copy_GBps=f"{bw0 / 1e9:.0f} (start) / {bw1 / 1e9:.0f} (end)",
                total_s=f"{time.perf_counter() - t_start:.0f}")
    save(out, rows, meta)
    print(f"wrote {out / 'rltriton.csv'} and {out / 'rltriton.md'} ({time.perf_counter() - t_start:.0f}s)")


if __name__ == "__main__":
    main()
