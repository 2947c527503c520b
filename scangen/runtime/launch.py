"""The Triton target: a generated op's kernels launched on a bound call.

The kernels are the op's ``<module>_triton`` companion (:func:`scangen.abi.triton_kernels`),
imported on its first launch: only this target imports Triton (a process whose calls all take
the numba or the torch path never does).

The arguments follow :func:`scangen.abi.kernel_args`, the order the compiler writes every
kernel's signature in. What is fixed for a plan (integer arguments, constexprs, grid) is built
on its first launch and kept in its :class:`~scangen.runtime.plans.LaunchPlan`; a call only
builds its pointer tuple.
"""
from __future__ import annotations

import math

import torch

from .. import abi
from . import launch_params, timemajor, workspace
from .backends import interpreting
from .tiles import lanes_on_steps, sm_count


def run(c) -> None:
    """Launch the kernel of ``c.config``'s family on the bound call ``c``."""
    op, cfg, lp = c.op, c.config, c.lp
    ks = abi.triton_kernels(op)  # the first call imports them (and Triton)
    # Unused pointer slots (absent optional inputs, float params, outputs not asked for): a
    # tensor on the plan's first launch, since Triton specialises pointer arguments on it; None
    # on the direct launches after it: a null pointer the kernel never reads, which Triton's
    # launcher takes without calling data_ptr() or asking the driver about it.
    dummy = None if lp.direct else next(iter(c.outs.values()))
    t, outs = c.tensors, c.outs
    if lp.meta is None:
        _first_launch(c, cfg, lp, ks.persist is not None)
    params = tuple(c.params.values()) if lp.lean else param_ptrs(c, dummy)
    ptrs = (*(t.get(i.name, dummy) for i in op.inputs), *params,
            *(outs.get(o, dummy) for o in op.outputs))
    stream, persist, lookback = ks[3:] if lp.lean else ks[:3]  # (scangen.abi.TritonKernels)
    if cfg.family == "lookback":
        ws = workspace.lookback_workspace(c, cfg, op.kernels.lb_words)
        launch(c, lookback, lp.grid, (*ptrs, ws, *lp.ints), lp.meta, cfg)
    elif cfg.family == "persist" and persist is not None:
        launch(c, persist, lp.grid, (*ptrs, *lp.ints), lp.meta, cfg)
    else:
        launch(c, stream, lp.grid, (*ptrs, *lp.ints), lp.meta, cfg)


# Whether plans whose call qualifies launch the lean entry kernels (a switch for measurements
# and tests: the kernels compute the same).
LEAN = True
ONE_CHUNK_ON = True  # one_chunk's switch, for A/B runs
LANES_VOLATILE = True  # lanes' volatile loads, for A/B runs
LANES_ROWS_A_WARP = 2  # lanes: rows a warp at least (16 rows on up to 8 warps: timemajor.TM_LB_LONG_LANE_WARPS)
# lanes: rows a tile at least; tiles of fewer than 32 rows (a warp's lanes on the steps too) from
# LANES_NARROW_MIN_STEPS steps (16 x 16 tiles lost on lanes: 32768x16 TD(lambda) 5.55 -> 5.82 us,
# discounted returns 4.86 -> 5.12; h100-2026-12-05-h-layout-ab-lanes16.md)
LANES_MIN_ROWS = 16
LANES_NARROW_MIN_STEPS = 64
MAXNREG = 0  # registers a thread at most (Triton's maxnreg; 0: ptxas decides), for A/B runs

# Look-back kernels whose registers leave them just past an occupancy cliff (a few registers
# more than would let one more program share each SM) are compiled again capped below it, when
# the grid has more programs than fit at once. GAE's 4096-step, 4-warp look-back takes 134
# registers: 3 programs an SM; capped at 128, 4 (H200, bench/NOTES.md open question 18: GAE
# 8x262144 19.7 -> 16.3 us, bench/results/h200-2026-12-04-az-reg-cliff-off-rows.txt); TD(lambda)'s
# takes 164: capped at 128, 19.75 -> 16.20 us (-ba-slack40-rows.txt). A cap far below what ptxas
# chose spills (V-trace's 255 capped at 128: 2.4x slower, masked GAE's 215 1.1x-1.2x), hence the
# slack, which takes TD(lambda) and leaves those two.
REG_CLIFF = True
REG_CLIFF_SLACK = 40  # registers a thread the cap may take away, at most
REG_CLIFF_MAX_FIT = 3  # ... only for kernels of this many programs an SM or fewer (GAE's
# 2048-step tile, 64 registers, 8 programs: capped at 56 it ran 4.5% slower, Retrace's 40 at
# 32 up to 7.7%: bench/results/h200-2026-12-04-ay-reg-cliff-off-rows.txt)
REG_FILE = 65536      # 32-bit registers an SM (sm_70 to sm_90)
CLIFF_CAPS: dict = {}  # kernel name -> (registers ptxas chose, cap or 0), as decided


def _programs_an_sm(regs: int, threads: int) -> int:
    """Programs of ``threads`` threads that fit an SM's registers at ``regs`` a thread
    (allocated in units of 8)."""
    return REG_FILE // (-(-regs // 8) * 8 * threads)


def cliff_cap(regs: int, threads: int, programs: int, sms: int) -> int:
    """The register cap that lets one more program share each SM, or 0: none within
    REG_CLIFF_SLACK of ``regs``, more than REG_CLIFF_MAX_FIT programs an SM fit already, or
    the grid's ``programs`` fit the ``sms`` at once."""
    fit = _programs_an_sm(regs, threads)
    if fit == 0 or fit > REG_CLIFF_MAX_FIT or programs <= fit * sms:
        return 0
    cap = REG_FILE // ((fit + 1) * threads) // 8 * 8
    return cap if 0 < regs - cap <= REG_CLIFF_SLACK else 0


def _cliff_extra(c, kernel, grid, args, meta, options: dict) -> dict:
    """``{"maxnreg": cap}`` for a look-back kernel just past an occupancy cliff (REG_CLIFF),
    else ``{}``: compiles the kernel with the launch's ``options`` (Triton's warmup, cached) to
    read its registers."""
    try:
        k = kernel.warmup(*args, **meta, grid=grid, **options)
        if hasattr(k, "_init_handles"):
            k._init_handles()
        regs = int(k.n_regs)
    except Exception:  # a Triton without warmup or n_regs: ptxas decides, as before
        return {}
    cap = cliff_cap(regs, options["num_warps"] * 32, math.prod(grid), sm_count(c.device))
    CLIFF_CAPS[getattr(kernel, "__name__", str(kernel))] = (regs, cap)
    return {"maxnreg": cap} if cap else {}


def lean_layout(c) -> dict | None:
    """The shared stride sets of a call that can take the lean kernels (``{"NT": (s1, s2, st),
    "N": (s1, s2), "NTK": (s1, s2, st, sk)}``, scangen.abi.LEAN_STRIDES), or None: its params
    are all floats and the tensors of each shape (the ``[N, T]`` inputs with the outputs) have
    the same strides."""
    if any(c.is_tensor(p) for p in c.params):
        return None
    sets = {"NT": {tuple(st) for st in c.out_strides.values()}, "N": set(), "NTK": set()}
    shapes = {i.name: i.shape for i in c.op.inputs}
    for name, st in c.strides.items():
        sets[shapes[name]].add(tuple(st[:2]) if shapes[name] == "N" else tuple(st))
    if any(len(v) > 1 for v in sets.values()):
        return None
    return {k: next(iter(v)) if v else (0,) * len(abi.LEAN_STRIDES[k]) for k, v in sets.items()}


def _first_launch(c, cfg, lp, persist: bool) -> None:
    """The plan's integer arguments, constexprs (in signature order) and grid (``persist``: the
    op has a persist kernel), for the lean kernels where the call qualifies."""
    ks = c.op.kernels
    shared = lean_layout(c) if LEAN else None
    lp.lean = shared is not None
    # reversed columns (GROUPED) hold one step a thread: the register shift's groups (SHIFT_G)
    # assume steps in order, so a grouped launch takes the plain shifted loads
    grouped = ks.grouped and launch_params.grouped_order(c, cfg)
    tile = dict(EVEN=even(c, cfg), ONE_CHUNK=one_chunk(c, cfg),
                K_DENSE=ks.k_dense and k_dense(c, cfg),
                SHIFT_G=shift_group(c, cfg) if ks.shift_g and not grouped else 1,
                GROUPED=grouped,
                BLOCK_N=cfg.block_n, BLOCK_T=cfg.block_t, BLOCK_K=cfg.block_k,
                ACC=_acc(c.acc), LB_WINDOW=launch_params.lookback_window(c, cfg, ks.lb_words),
                LB_SPIN=launch_params.lookback_spin(c, cfg),
                LB_PID=launch_params.lookback_pid(c, cfg), LANES=lanes(c, cfg))
    tile["LANE_WARPS"] = lane_warps(cfg, tile["LANES"], tile["SHIFT_G"])
    strides = {"input": c.strides, "param": c.pstrides, "output": c.out_strides}
    ints, meta = [], {}
    for a in abi.op_kernel_args(c.op, workspace=False, lean=lp.lean):
        if a.kind == "int" and a.role == "size":
            ints.append(getattr(c, a.name))
        elif a.kind == "int" and a.role == "layout":  # a lean kernel's shared strides
            ints.append(shared[a.of][abi.LEAN_STRIDES[a.of].index(a.name)])
        elif a.kind == "int":  # x__s1, x__s2, x__st, x__sk; outputs o__os1, ...: 0 if absent
            st = strides[a.role].get(a.of)
            ints.append(st[abi.stride_index(a)] if st else 0)
        elif a.kind != "constexpr":
            continue
        elif a.role == "tile":
            meta[a.name] = tile[a.name]
        elif a.name.startswith("HAS_"):
            meta[a.name] = a.of in c.tensors
        elif a.name.startswith("STORE_"):
            meta[a.name] = a.of in c.outs
        else:
            meta[a.name] = c.is_tensor(a.of)
    # a module generated before a tile constexpr existed runs without it, as it was generated
    # (LANE_WARPS: the columns' own order); the direct launches pass the constexprs in order
    known = abi.triton_kernels(c.op).stream.arg_names
    meta = {k: v for k, v in meta.items() if k in known or k not in abi.TILE_CONSTEXPRS}
    tiles = -(-(c.R1 * c.R2) // cfg.block_n)  # row tiles
    if cfg.family == "lookback":  # one program per ticket (row, chunk)
        grid = (launch_params.lookback_tickets(c, cfg),)
    elif cfg.family == "persist" and persist:
        grid = (min(tiles, launch_params.persistent_programs(c)),)
    else:
        grid = (tiles,)
    lp.ints, lp.grid, lp.meta = tuple(ints), grid, meta




def _acc(dtype):
    import triton.language as tl
    return tl.float64 if dtype == torch.float64 else tl.float32


def launch(c, kernel, grid, args: tuple, meta: dict, cfg) -> None:
    """Launch a generated kernel. The first launch of a plan goes through Triton's launcher,
    which binds and specialises the arguments; later launches of the same plan (same shapes,
    strides, dtypes and alignment) call the compiled kernel's launcher directly, skipping the
    per-argument binding and the per-launch closure, which dominate the cost of a small call.
    A Triton launch hook (a profiler) sends every launch through Triton's own path."""
    global _KNOBS
    lp = c.lp
    entry = lp.compiled.get(kernel)
    if entry is not None and not hooked():
        run_, function, packed, stream_of, device = entry
        g = (*grid, 1, 1)
        run_(g[0], g[1], g[2], stream_of(device), function, packed, None, None, None, *args,
             *meta.values())
        if not lp.fast_decided:  # what the fast path checks its own arguments against
            lp.seen.append((kernel, g, args, meta))
        return
    if lp.direct:  # a hook took this path: real tensors in the unused pointer slots
        dummy = next(iter(c.outs.values()))
        args = tuple(dummy if a is None else a for a in args)
    # FMA fusion pinned on: the combines are written as a * b + c, and Triton 3.10 turns it
    # off by default (3.9 warns that it will).
    options = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages, enable_fp_fusion=True)
    extra = {"maxnreg": MAXNREG} if MAXNREG and not interpreting() else {}
    if not extra and REG_CLIFF and cfg.family == "lookback" and not interpreting():
        extra = _cliff_extra(c, kernel, grid, args, meta, options)
    compiled = kernel[grid](*args, **meta, **options, **extra)
    if not interpreting() and hasattr(compiled, "packed_metadata") and hasattr(compiled, "run"):
        from triton.runtime.driver import driver
        try:
            from triton import knobs
            _KNOBS = knobs.runtime
        except ImportError:  # no launch hooks in this Triton
            pass
        lp.compiled[kernel] = (compiled.run, compiled.function, compiled.packed_metadata,
                               driver.active.get_current_stream, c.device.index or 0)
        lp.direct = True  # later calls of this plan pass None in unused pointer slots


# triton.knobs.runtime once a kernel was compiled: its launch hooks (a HookChain, or None in
# older Triton) are honoured by taking Triton's own launch path while any is registered.
_KNOBS = None


def hooked() -> bool:
    """Whether a Triton launch hook (a profiler) is registered: launches then go through
    Triton's own path, which calls it."""
    hook = _KNOBS.launch_enter_hook if _KNOBS is not None else None
    return hook is not None and getattr(hook, "calls", True)


def param_ptrs(c, dummy) -> tuple:
    """The per-call kernel arguments of every param, in order: (scalar value, pointer) each; a
    tensor param passes 0.0 and itself, a float passes itself and ``dummy``."""
    out = ()
    for v in c.params.values():
        out += (0.0, v) if isinstance(v, torch.Tensor) else (v, dummy)
    return out


# ------------------------------------------------- constexprs that follow the call's layout

def shift_group(c, cfg) -> int:
    """Steps per group of the register shift (template option ``input_shift="split"``): the
    steps each thread holds of a ``[BLOCK_N, BLOCK_T]`` tile in Triton's coalesced layout, so
    that taking ``x[t +- 1]`` from the aligned tile stays within each thread's registers. That
    layout gives each thread one 16-byte vector of the narrowest ``[N, T]`` tensor, capped by
    the tile's elements per thread; strided time (time-major buffers) gives one step."""
    nt = [(c.tensors[n], c.strides[n]) for n in c.tensors if c.strides[n][2] != 0]
    nt += [(o, c.out_strides[n]) for n, o in c.outs.items()]
    if any(st[2] != 1 for _, st in nt):
        return 1
    # Triton vectorises only what it can prove 16-byte aligned: pointers and row strides that
    # its launcher specialised as multiples of 16 (else every load is scalar: one step a thread)
    if any(t.data_ptr() % 16 or st[0] % 16 or st[1] % 16 for t, st in nt):
        return 1
    return layout_steps(min(t.element_size() for t, _ in nt), cfg.block_n, cfg.block_t,
                        cfg.num_warps)


def layout_steps(itemsize: int, block_n: int, block_t: int, num_warps: int) -> int:
    """Consecutive steps a thread holds of a ``[block_n, block_t]`` tile in Triton's coalesced
    layout when the narrowest tensor has ``itemsize`` bytes: one 16-byte vector of it, capped by
    the tile's elements per thread and by the chunk."""
    return max(1, min(16 // itemsize, block_n * block_t // (32 * num_warps), block_t))


def even(c, cfg) -> bool:
    """Whether every ``[BLOCK_N, BLOCK_T]`` tile of the call is full (rows a multiple of
    ``BLOCK_N``, T of ``BLOCK_T``): the kernels then drop their bounds masks. Never for the
    persist family, whose programs load an item past their last one (masked off by rows)."""
    return (cfg.family != "persist" and (c.R1 * c.R2) % cfg.block_n == 0
            and c.T % cfg.block_t == 0)


def one_chunk(c, cfg) -> bool:
    """Whether every row is one chunk (``T <= BLOCK_T``): the kernels then compile without the
    chunk loop and the carry between chunks (``ONE_CHUNK``). At 128 x 1024 on 8 warps
    this takes eligibility traces' stream kernel from 272 to 176 SASS instructions and from
    four barriers to one (bench/NOTES.md). ``ONE_CHUNK_ON = False`` turns it off for A/B runs."""
    return ONE_CHUNK_ON and c.T <= cfg.block_t


def lanes(c, cfg) -> int:
    """Whether the tile takes a row a lane (``LANES``, 0 if not): time-major buffers (adjacent
    rows, ``timemajor.rows_contiguous``) without a trailing axis, in tiles of at least
    32 rows and ``LANES_ROWS_A_WARP`` rows a warp (32 rows on two to eight warps: the warps split
    the chunk's steps, and the scan joins their parts through shared memory once), or of
    ``LANES_MIN_ROWS`` (16) rows and ``LANES_NARROW_MIN_STEPS`` steps (two lanes a row, each over
    part of the steps, as the warps); in the look-back, where
    ``timemajor.lookback_lanes`` allows. The kernels then hide the rows' alignment from Triton,
    whose coalescing gives each lane whole rows (one element a step: each step still one
    128-byte load a warp) in place of 16-byte vectors across rows, so the scan along time runs
    in each thread's registers with no shuffles (eligibility traces, 32 x 64 tiles, sm_90 PTX:
    1331 instructions on one warp and no barrier, against 1323 on each of four warps with 256
    shuffles and 19 barriers). ``LANES == 2``: the tile's loads are volatile, so that ptxas
    issues them all up front (``timemajor.lanes_volatile`` says where; ``LANES_VOLATILE = False``
    turns them off for A/B runs)."""
    if (cfg.block_k == 1 and cfg.block_n >= LANES_ROWS_A_WARP * cfg.num_warps
            and cfg.block_n >= LANES_MIN_ROWS and timemajor.rows_contiguous(c)
            and (cfg.block_n >= 32 or cfg.block_t >= LANES_NARROW_MIN_STEPS)
            and (cfg.family != "lookback" or timemajor.lookback_lanes(c, cfg))):
        return 2 if LANES_VOLATILE and timemajor.lanes_volatile(c) else 1
    return 0


def lane_warps(cfg, lanes: int, shift_g: int = 1) -> int:
    """The warps that split a lane tile's steps (``LANE_WARPS``, 1 if none): Triton's layout of a
    lane tile puts 32 rows on a warp's threads and its warps on the rows first, then on the steps,
    where warp w would take the columns w, w + W, w + 2W, ... and the scan would join the warps at
    every step through shared memory. With ``LANE_WARPS`` = W > 1 the kernels give each warp a run
    of ``BLOCK_T / W`` consecutive steps instead, scanned in its registers, and join the runs once
    a chunk (``scangen.kernels.common.scan_tiles``; eligibility traces' 32 x 128 stream tile on 4 warps,
    sm_90: 255 -> 96 registers, 256 -> 6 shared-memory loads a thread; bench/NOTES.md, the
    twenty-seventh round)."""
    if not lanes or shift_g != 1:
        return 1
    on_rows = max(1, min(cfg.num_warps, cfg.block_n // 32))
    # a tile of fewer than 32 rows (LANES_MIN_ROWS): Triton puts a warp's spare lanes on the
    # steps before its warps, 32 / rows lanes a row, so column j sits in slot j % W of the
    # W = 32 / rows x warps over the steps, and each slot takes a run alike
    return max(1, min(lanes_on_steps(cfg.block_n) * cfg.num_warps // on_rows, cfg.block_t))


def k_dense(c, cfg) -> bool:
    """Whether the sums over the trailing axis may address ``[N, T, K]`` inputs as dense blocks
    of ``BLOCK_K == K`` contiguous elements per step: offsets ``t * BLOCK_K + k``, whose
    alignment Triton can prove, give vector loads (``t * K_stride + k`` with a runtime stride
    gives scalar ones)."""
    ntk = [c.strides[n] for n in c.tensors if len(c.strides[n]) == 4]
    return bool(ntk) and c.K == cfg.block_k and all(st == c.K and sk == 1
                                                     for _, _, st, sk in ntk)
