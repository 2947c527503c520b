#!/usr/bin/env python3
"""Launch-configuration sweep: every candidate Config of scangen.runtime.config for each (algorithm, shape),
each checked against a float64 oracle and timed, in one process, beside the copy bandwidth.

    python3 bench/dev/sweep.py --out DIR [--algos gae,vtrace] [--shapes 16384x1024,...]
    python3 bench/dev/sweep.py --out DIR --compile-only --part 3/8   # warm Triton's cache

Each candidate is forced through ``scangen.runtime.config.override``. The dispatch rule in
scangen/runtime/config.py is read off these tables (bench/NOTES.md says which run).
``--variants`` adds kernels rendered with other template options
(``scangen.compiler.options.Options``, through ``scangen.testing.compile_variant``), under a renamed op:
``shift=gather`` reads the state's neighbour through tl.gather instead of the exclusive scan;
``input_shift=gather`` takes next(x)/prev(x) of an input from its aligned tile with tl.gather
instead of a second, unaligned load; ``chain=sequential`` scans chained scans (masked GAE's) one
after the other; ``scan_order=natural`` runs reverse scans as reverse associative scans instead of
forward over regrouped steps (the default).
``--base DIR`` adds each algorithm's module as generated at another revision (DIR/<algo>.py, e.g.
``git archive REV generated | tar -x -C DIR --strip-components=1``), under ``<algo>[base]``:
the generated code before and after a change, measured side by side in one process.
Writes DIR/sweep.json (every measurement) and prints the best configs per case last.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]  # the checkout, for scangen

import torch  # noqa: E402

import scangen  # noqa: E402
from scangen import runtime  # noqa: E402
from scangen.benchmark.inputs import apply_no_trunc  # noqa: E402
from scangen.compiler.store import triton_version  # noqa: E402
from scangen.runtime import config as sg_config  # noqa: E402
from scangen.runtime import tiles as sg_tiles  # noqa: E402
from scangen.runtime import launch as sg_launch  # noqa: E402
from scangen.runtime import launch_params as sg_launch_params  # noqa: E402
from scangen.runtime.config import Config  # noqa: E402
from layout_ab import set_constants  # noqa: E402  (bench/dev, beside this script)
from scangen.testing import (  # noqa: E402
    as_time_major, assert_close, compile_variant, make_inputs)

ALGOS = ["gae", "vtrace", "retrace", "lambda_returns", "discounted_returns", "eligibility_traces",
         "episodic_prefix_sum", "masked_gae"]
SHAPES = ["16384x1024", "4096x128", "32768x16", "256x8192", "64x65536", "1x1048576"]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


ROW_WARPS = (4, 8)  # --warps: the stream and persist candidates' warps


def candidates(N: int, T: int, K: int, quick: bool = False, tiles=None) -> list[Config]:
    """Stream tiles of 1024 and 2048 elements (K included) with chunks from T/4 to T (at most
    1024), 4 or 8 warps, in the persist family too for chunks of 512 elements or more; for long
    rows also the look-back family with 1024-4096 steps per program (8192 from 2^18 steps; 16
    warps too from 4096).
    ``quick``: 1024-element stream tiles with the longest two chunk lengths, pipelining on and
    off, and the look-back family. ``tiles`` replaces the stream tile sizes (e.g. (256, 512)
    for more, smaller programs at small shapes)."""
    out = []
    kk = min(K, 16) if K > 1 else 1
    tp = max(16, 1 << (T - 1).bit_length())
    lengths = [bt for bt in (16, 32, 64, 128, 256, 512, 1024)
               if bt <= tp and bt >= min(tp, 1024) // 4 // kk and bt * kk <= 2048]
    for bt in lengths[-2:] if quick else lengths:
        for tile in tiles or ((1024,) if quick else (1024, 2048)):
            bn = tile // (bt * kk)
            if bn < 1 or bn > max(1, N):
                continue
            for nw in ROW_WARPS:
                for ns in (1, 3) if quick else (1,):
                    out.append(Config(bn, bt, kk, nw, "stream", ns))
                    if bt * kk >= 512:  # long chunks: the persistent stream too
                        out.append(Config(bn, bt, kk, nw, "persist", ns))
    if T >= 4096:
        for bt in (1024, 2048, 4096) + ((8192,) if T >= 1 << 18 else ()):
            for nw in (4, 8, 16) if bt >= 4096 and kk == 1 else (4, 8):
                out.append(Config(1, max(16, bt // kk), kk, nw, "lookback", 1))
    return out


TM_LB_SWEEP = {"rows": (8, 16, 32, 64), "tiles": (512, 1024, 2048, 4096), "warps": (4,)}
# --tm-lanes: time-major tiles of one or two rows a lane (runtime.launch.lanes, the LANES constexpr:
# 32 to 64 rows a warp, each thread walking its rows' steps in registers, the scan along time with
# no shuffles or barriers), 1, 2 or 4 warps, chunks of 16 to 64 steps.
TM_LANES_SWEEP = {"rows": (32, 64, 128), "steps": (16, 32, 64), "warps": (1, 2, 4),
                  "elements": (8192,),  # elements a tile at most
                  "lb-min-t": (512,)}  # the look-back tiles from rows of this many steps


def time_major_lane_candidates(N: int, T: int) -> list[Config]:
    """Stream, persist and look-back tiles of TM_LANES_SWEEP (rows x steps, one or two rows a
    lane; --families keeps some)."""
    out = []
    for nw in TM_LANES_SWEEP["warps"]:
        for bn in TM_LANES_SWEEP["rows"]:
            if bn > max(32, sg_tiles.pow2(N)) or not sg_launch.LANES_ROWS_A_WARP * nw <= bn <= 64 * nw:
                continue
            for bt in TM_LANES_SWEEP["steps"]:
                if bt > max(16, sg_tiles.pow2(T)) or bn * bt > max(TM_LANES_SWEEP["elements"]):
                    continue
                out.append(Config(bn, bt, 1, nw, "stream", 3))
                out.append(Config(bn, bt, 1, nw, "persist", 3))  # next tile's loads first
                if T >= TM_LANES_SWEEP["lb-min-t"][0] and bt >= 16 and bt <= sg_tiles.pow2(T) // 2:
                    out.append(Config(bn, bt, 1, nw, "lookback", 3))
    return out


# --tm-narrow: time-major tiles of 1 to 8 rows and long chunks (up to a whole row of 1024 steps),
# the rows layout's shape of work over strided steps: each step's load is 4 to 32 bytes a row
# tile, and neighbouring programs share their 32-byte sectors through L2 (bench/NOTES.md open
# question 15 (c): 128x1024 and 64x1024 as one chunk a row tile, no look-back).
TM_NARROW_SWEEP = {"rows": (1, 2, 4, 8), "steps": (256, 512, 1024), "warps": (2, 4, 8)}


def time_major_narrow_candidates(N: int, T: int) -> list[Config]:
    """Stream tiles of TM_NARROW_SWEEP (one chunk where the steps cover the row), and from 512
    steps the look-back over the same tiles (chunks of at most half a row)."""
    out = []
    for bn in TM_NARROW_SWEEP["rows"]:
        if bn > max(1, sg_tiles.pow2(N)):
            continue
        for bt in TM_NARROW_SWEEP["steps"]:
            if bt > max(16, sg_tiles.pow2(T)) or bn * bt > 8192:
                continue
            for nw in TM_NARROW_SWEEP["warps"]:
                out.append(Config(bn, bt, 1, nw, "stream", 3))
                if T >= 512 and bt <= sg_tiles.pow2(T) // 2:
                    out.append(Config(bn, bt, 1, nw, "lookback", 3))
    return out


def time_major_candidates(N: int, T: int, K: int) -> list[Config]:
    """Time-major tiles: 4 to 64 rows (fewer rows per program: more programs, each step's loads
    still 16 bytes or more of fp32 across rows) with chunks of 16 to 256 steps, at most 4096
    elements per tile, 4 warps (2 for tiles of 512 elements or fewer); from 512 steps also the
    look-back over tiles of 8 to 64 rows (--tm-window: its predecessors a round trip)."""
    if K > 1:  # a trailing axis (Retrace): 4 to 32 rows x 16 to 64 steps x K, up to 4096 elements
        kk, out = min(K, 16), []
        for bn in (4, 8, 16, 32):
            for bt in (16, 32, 64):
                if bn * bt * kk <= 4096 and bn <= max(4, sg_tiles.pow2(N)):
                    out.append(Config(bn, bt, kk, 4, "stream", 3))
                    if T >= 512 and bt <= sg_tiles.pow2(T) // 2 and bn <= 16:
                        out.append(Config(bn, bt, kk, 4, "lookback", 3))
        return out
    out = []
    for bn in (4, 8, 16, 32, 64):
        if bn > max(4, sg_tiles.pow2(N)):
            continue
        for bt in (16, 32, 64, 128, 256):
            if bt <= max(16, sg_tiles.pow2(T)) and 256 <= bn * bt <= 4096:
                out.append(Config(bn, bt, 1, 2 if bn * bt <= 512 else 4, "stream", 3))
    if T >= 512:  # the look-back over tiles of rows: 8 to 64 rows, 512 to 4096 elements a tile
        for bn in TM_LB_SWEEP["rows"]:
            for tile in TM_LB_SWEEP["tiles"]:
                bt = tile // bn
                if bn <= max(8, sg_tiles.pow2(N)) and 16 <= bt <= sg_tiles.pow2(T) // 2:
                    out += [Config(bn, bt, 1, nw, "lookback", 3) for nw in TM_LB_SWEEP["warps"]]
    return out


def add_grid_args(ap, prefix: str, grid: dict, what: str) -> None:
    """``--<prefix>-<key> a,b,...`` for each key of a candidate grid (TM_*_SWEEP)."""
    for key in grid:
        ap.add_argument(f"--{prefix}-{key}", default=None,
                        help=f"{what} {key} (default {','.join(map(str, grid[key]))})")


def apply_grid_args(args, prefix: str, grid: dict) -> None:
    """The grid's values given by add_grid_args' options replace its defaults."""
    for key in grid:
        given = getattr(args, f"{prefix}_{key}".replace('-', '_'))
        if given:
            grid[key] = tuple(int(x) for x in given.split(","))


def variant_fn(algo: str, option: str, cache: Path):
    """The op compiled from specs/<algo>.yaml with a template option (name=value) set."""
    key, value = option.split("=")
    return compile_variant(algo, cache, **{key: value})


def base_fn(algo: str, base: Path):
    """The public function of ``base/<algo>.py``: a module generated at another revision, run
    on this checkout's runtime (scangen.runtime); its kernels from ``base/<algo>_triton.py``
    beside it (scangen.abi.load_module registers the module, whose op finds its companions by
    its file)."""
    module = scangen.abi.load_module(f"scangen_base_{algo}", base / f"{algo}.py")
    return getattr(module, module.OP.function)


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def bandwidth_gbs() -> float:
    from triton.testing import do_bench
    a = torch.empty(2**29, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), warmup=25, rep=100, return_mode="median")
    return 2 * a.numel() * 4 / ms / 1e6


def compiled_kernel(plan):
    """Triton's compiled kernel behind the plan's direct launches (its registers and spills),
    found in the JIT functions' caches by the function handle the plan launches; None if not."""
    handles = {entry[1] for entry in plan.lp.compiled.values()}
    for jit in scangen.abi.triton_kernels(plan.op):  # the full and the lean kernels
        for caches in getattr(jit, "device_caches", {}).values():
            for k in caches[0].values():
                if getattr(k, "function", None) in handles and hasattr(k, "n_regs"):
                    return k
    return None


def measure(fn, kw, oracle, cfg, rec, floor_us, args, sets=()) -> None:
    """One candidate (``cfg``; None: the dispatch rule's choice): its first call checked against
    the oracle, then timed; the result, registers and spills go into ``rec``. ``sets``: further
    copies of ``kw`` the timed calls cycle through (--sets), so that a call finds little of its
    data in L2, as in bench/rltriton.py."""
    import itertools

    from triton.testing import do_bench, do_bench_cudagraph
    cycle = itertools.cycle([kw, *sets])
    try:
        out = as_tuple(fn(**kw, backend="triton"))
        torch.cuda.synchronize()
        plan = next(iter(runtime.PLANS.values()), None)
        if cfg is None:
            rec["config"] = plan.config._asdict() if plan is not None else None
        if not args.compile_only:
            for o, e in zip(out, oracle):
                assert_close(o, e, dtype=o.dtype)
            call = lambda: fn(**next(cycle), backend="triton")  # noqa: E731
            us = 1e3 * (do_bench_cudagraph(call, rep=20, return_mode="median")
                        if args.graph else
                        do_bench(call, warmup=2, rep=12, return_mode="median"))
            rec.update(us=us, pct_floor=100 * floor_us / us)
        comp = compiled_kernel(plan) if plan is not None else None
        if comp is not None:
            rec.update(regs=comp.n_regs, spills=comp.n_spills)
    except Exception as exc:  # noqa: BLE001
        rec["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="", help="e.g. shift=gather,input_shift=gather")
    ap.add_argument("--base", type=Path, default=None,
                    help="a folder of generated modules from another revision, measured beside")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fewer candidates (see candidates())")
    ap.add_argument("--tiles", default="", help="stream tile sizes in elements, e.g. 256,512,1024")
    ap.add_argument("--warps", default="", help="stream/persist candidates' warps (default 4,8)")
    ap.add_argument("--dtype", default="fp32", choices=sorted(DTYPES),
                    help="floating inputs and outputs (flags stay bool, actions int64)")
    ap.add_argument("--part", default="0/1", help="i/n: this process takes every n-th case")
    ap.add_argument("--layout", default="rows", choices=["rows", "time-major"],
                    help="storage of the [N, T] inputs; time-major sweeps time_major_candidates()")
    ap.add_argument("--graph", action="store_true",
                    help="time each call captured in a CUDA graph (device time, no host) instead of "
                         "do_bench, whose intervals are host-bound at small and few-row shapes")
    ap.add_argument("--no-trunc", action="store_true",
                    help="the calls without truncations (bench.py's notrunc variant)")
    ap.add_argument("--families", default="", help="keep only these candidate families, "
                    "e.g. lookback (the default configuration is measured regardless)")
    ap.add_argument("--time-budget", type=float, default=1e9)
    ap.add_argument("--top", type=int, default=0, help="also print each case's N fastest configs")
    add_grid_args(ap, "tm-lb", TM_LB_SWEEP, "time-major look-back candidates'")
    ap.add_argument("--tm-lanes", action="store_true",
                    help="time-major: sweep time_major_lane_candidates() instead (tiles of one or "
                         "two rows a lane, runtime.launch.lanes)")
    ap.add_argument("--tm-narrow", action="store_true",
                    help="time-major: sweep time_major_narrow_candidates() instead (1-8 rows, "
                         "chunks of 256 steps to the whole row)")
    add_grid_args(ap, "tm-narrow", TM_NARROW_SWEEP, "--tm-narrow candidates'")
    add_grid_args(ap, "tm-lanes", TM_LANES_SWEEP, "--tm-lanes candidates'")
    ap.add_argument("--lanes-rows-a-warp", type=int, default=None,
                    help="runtime.launch.LANES_ROWS_A_WARP (32: no 32-row tiles on two warps)")
    ap.add_argument("--lanes-plain", action="store_true",
                    help="tiles of a row a lane with plain loads (runtime.launch.LANES_VOLATILE off)")
    ap.add_argument("--tm-window", type=int, default=None,
                    help="runtime.launch_params.TM_LB_WINDOW for this run (the row-tile look-back's window)")
    ap.add_argument("--maxnreg", type=int, default=0,
                    help="runtime.launch.MAXNREG for this run: registers a thread at most")
    ap.add_argument("--set", default="", metavar="MOD.NAME=INT,...",
                    help="module constants for this run, e.g. "
                         "scangen.runtime.timemajor.TM_LB_LANES_LOADS=1000 (so that runtime.launch.lanes "
                         "takes candidates the rule in force would not)")
    ap.add_argument("--sets", action="store_true",
                    help="cycle through copies of the inputs (up to 16, 3x the L2 in all), as "
                         "bench/rltriton.py does, so that calls read from memory, not L2")
    args = ap.parse_args()
    set_constants(args.set)
    if args.tm_window:
        sg_launch_params.TM_LB_WINDOW = args.tm_window
    if args.lanes_plain:
        sg_launch.LANES_VOLATILE = False
    if args.maxnreg:
        sg_launch.MAXNREG = args.maxnreg
    if args.lanes_rows_a_warp:
        sg_launch.LANES_ROWS_A_WARP = args.lanes_rows_a_warp
    for prefix, grid in (("tm-lb", TM_LB_SWEEP), ("tm-narrow", TM_NARROW_SWEEP),
                         ("tm-lanes", TM_LANES_SWEEP)):
        apply_grid_args(args, prefix, grid)
    if args.warps:
        global ROW_WARPS
        ROW_WARPS = tuple(int(x) for x in args.warps.split(","))
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    part, parts = map(int, args.part.split("/"))
    cache = Path(tempfile.gettempdir()) / "scangen-sweep-cache"
    algos, shapes = args.algos.split(","), args.shapes.split(",")
    fns = {a: (a, getattr(scangen, f"compute_{a}")) for a in algos}
    for v in filter(None, args.variants.split(",")):
        for a in algos:  # every algorithm; an option that does not apply renders the same
            fns[f"{a}[{v}]"] = (a, variant_fn(a, v, cache))
    if args.base is not None:
        for a in algos:
            fns[f"{a}[base]"] = (a, base_fn(a, args.base))
    cases = [(name, shape) for name in fns for shape in shapes]
    if args.base is not None:  # each pair twice, in the order new, base, base, new: neither side
        # is always measured first (the first measurement of a case tends to be the slower)
        cases = [(n, shape) for a in algos for shape in shapes
                 for n in (a, f"{a}[base]", f"{a}[base]", a)]
    rows = []
    bw = None if args.compile_only else bandwidth_gbs()
    for i, (name, shape) in enumerate(cases):
        if i % parts != part or time.perf_counter() - t0 > args.time_budget:
            continue
        algo, fn = fns[name]
        N, T = map(int, shape.split("x"))
        K = 8 if algo == "retrace" else 1
        kw = make_inputs(algo, N, T, seed=i, device="cuda", A=8, dtype=DTYPES[args.dtype])
        if args.no_trunc:
            kw = apply_no_trunc(f"compute_{algo}", kw)
        if args.layout == "time-major":
            kw = as_time_major(kw)
        kw64 = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
                for k, v in kw.items()}
        oracle = as_tuple(fn(**kw64, backend="torch"))
        nbytes = sum(v.numel() * v.element_size() for v in kw.values() if torch.is_tensor(v))
        nbytes += sum(o.numel() * DTYPES[args.dtype].itemsize for o in oracle)
        floor_us = nbytes / (bw * 1e3) if bw else None
        sets = []
        if args.sets:
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
            k = max(1, min(16, -(-3 * l2 // nbytes)))
            sets = [{a: v.clone() if torch.is_tensor(v) else v for a, v in kw.items()}
                    for _ in range(k - 1)]
        runtime.PLANS.clear()
        cfgs = (time_major_lane_candidates(N, T) if args.tm_lanes and K == 1 else
                time_major_narrow_candidates(N, T) if args.tm_narrow and K == 1 else
                time_major_candidates(N, T, K) if args.layout == "time-major" else
                candidates(N, T, K, args.quick,
                           tuple(int(x) for x in args.tiles.split(",")) if args.tiles else None))
        if args.families:
            cfgs = [c for c in cfgs if c.family in args.families.split(",")]
        for cfg in [None] + cfgs:
            rec = dict(algo=name, shape=shape, config=None if cfg is None else cfg._asdict())
            with contextlib.ExitStack() as forced:
                if cfg is not None:  # plans made outside the block are not used in it, nor kept
                    forced.enter_context(sg_config.override(lambda c, cfg=cfg: cfg))
                runtime.PLANS.clear()
                measure(fn, kw, oracle, cfg, rec, floor_us, args, sets)
            rows.append(rec)
        runtime.PLANS.clear()
        (args.out / f"sweep{'' if parts == 1 else part}.json").write_text(
            json.dumps(dict(bandwidth_gbs=bw, dtype=args.dtype, graph=args.graph, sets=args.sets,
                            tm_lb_window=sg_launch_params.TM_LB_WINDOW,
                            gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                            triton=triton_version(), rows=rows),
                       indent=1))
    if args.compile_only:
        return
    print(f"{'CUDA-graph replays' if args.graph else 'do_bench'}"
          f"{' over rotated input sets' if args.sets else ''}; "
          f"copy bandwidth {bw:,.0f} GB/s; {len(rows)} measurements in {time.perf_counter() - t0:.0f} s")
    for name, shape in dict.fromkeys(cases):
        mine = [r for r in rows if r["algo"] == name and r["shape"] == shape and "us" in r]
        if not mine:
            continue
        base, best = mine[0], min(mine, key=lambda r: r["us"])
        errs = sum(1 for r in rows if r["algo"] == name and r["shape"] == shape and "error" in r)
        c = best["config"]
        print(f"{name:26s} {shape:>11s} default {base['us']:8.1f} us {base['pct_floor']:5.1f}% | best "
              f"{best['us']:8.1f} us {best['pct_floor']:5.1f}% {c['family'][:4]} bn={c['block_n']} "
              f"bt={c['block_t']} w={c['num_warps']} s={c['num_stages']} "
              f"regs={best.get('regs')} "
              f"spills={best.get('spills')} errors={errs}")
        for r in sorted(mine, key=lambda r: r["us"])[:args.top]:
            c = r["config"] or base.get("config") or {}
            print(f"    {r['us']:8.1f} us {r['pct_floor']:5.1f}% "
                  f"{'(default) ' if r is base else ''}{c.get('family', '?')[:4]} "
                  f"bn={c.get('block_n')} bt={c.get('block_t')} w={c.get('num_warps')} "
                  f"s={c.get('num_stages')} regs={r.get('regs')}")


if __name__ == "__main__":
    main()
