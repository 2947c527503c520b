"""Stage 4b: the Triton target's decisions, from a :class:`~scangen.compiler.plan.Plan` and the
template :class:`~scangen.compiler.options.Options`, as one frozen :class:`TritonPlan`.

The plan says what to compute; this says how the kernels read and scan it: which tile loads
each symbol takes (an ``[N]`` row value, an aligned tile, a tile shifted in registers from the
aligned one, a shifted load, a ``tl.gather``), the order of a reverse scan's steps, which scans
run jointly, the look-back workspace's word layout, the kernels' arguments
(:func:`scangen.abi.kernel_args`). The renderer
(:mod:`scangen.compiler.render`) only prints these.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import abi
from ..abi import split_sym
from .options import Options
from .plan import Plan

TIME_SHIFTS = ("", "next", "prev", "next2", "prev2")


@dataclass(frozen=True)
class RowLoad:
    """An ``[N]`` input, one value per row."""
    src: str
    optional: bool
    default: float | None


@dataclass(frozen=True)
class TileLoad:
    """One ``[BLOCK_N, BLOCK_T]`` tile the expressions read as ``sym``.

    ``how``: ``"tile"`` (a load at the step offset ``shift``), ``"split"`` (the aligned tile of
    ``src`` with vector loads, its ``shifts`` — ``(symbol, is_next)`` — taken from it in
    registers), ``"gather"`` (``src``'s aligned tile shifted by ``tl.gather``, the step beyond
    the chunk loaded alone) or ``"param"`` (a tensor param's tile)."""
    sym: str
    src: str
    how: str
    shift: str = ""
    optional: bool = False
    default: float | None = None
    index: bool = False
    shifts: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class ScanGroup:
    """Scans run as one: a single scan, or (``joint``) the two of a JointPlan, whose look-back
    words start at ``lb_base`` (three per scan, seven per joint pair)."""
    scans: tuple[str, ...]
    joint: bool
    lb_base: int


@dataclass(frozen=True)
class TritonPlan:
    grouped: bool                     # reverse scans in grouped step order (scan_order)
    # [N, T, K] specs (one step a thread): the order is the launch's, the GROUPED constexpr
    # (runtime.launch_params.grouped_order): the chunk's steps in reverse, scanned forward, or natural
    grouped_choice: bool
    row_loads: tuple[RowLoad, ...]
    loads: tuple[TileLoad, ...]
    groups: tuple[ScanGroup, ...]
    lb_words: int
    shifts: frozenset                 # step offsets the loads use ("next", "prev2", ...)
    gather_next: bool                 # index tiles for tl.gather shifts
    gather_prev: bool
    persist: bool                     # the module has a persist kernel
    shifted_state: bool               # a scan reads its own neighbouring state
    args: tuple[abi.Arg, ...]         # the stream and persist kernels' (lookback: + _ws)
    k_dense: bool
    shift_g: bool

    @property
    def split_loads(self) -> bool:
        return any(ld.how == "split" for ld in self.loads)

    @property
    def joint(self) -> bool:
        return any(g.joint for g in self.groups)


def plan_triton(plan: Plan, options: Options) -> TritonPlan:
    ir = plan.ir
    either = (ir.reverse and options.scan_order == "grouped"
              and "gather" not in (options.shift, options.input_shift))
    ntk = any(i.shape == "NTK" for i in ir.inputs)
    grouped, grouped_choice = either and not ntk, either and ntk
    row_loads, loads = _loads(plan, options)
    split = any(ld.how == "split" for ld in loads)
    groups = _groups(plan, options)
    gathers = {ld.shift for ld in loads if ld.how == "gather"}
    if options.shift == "gather" and any(s.shifted for s in plan.scans):
        gathers.add("next" if ir.reverse else "prev")  # the state's neighbour, by tl.gather
    states = {s.name for s in ir.scans}
    shifts = {split_sym(s)[1] for s in plan.symbols if split_sym(s)[0] not in states}
    shifts |= {g.shift for g in plan.gathers}
    shifts |= {split_sym(s)[1] for sp in plan.sums for s in sp.k_symbols}
    shifted = {s.name for s in plan.scans if s.shifted}
    shifted_state = any(n in shifted for g in groups if not g.joint for n in g.scans)
    k_dense, shift_g = bool(plan.sums), bool(split or grouped)
    args = abi.kernel_args(ir.inputs, ir.params, [o.name for o in ir.outputs], workspace=False,
                           k_dense=k_dense, shift_g=shift_g, grouped=grouped_choice)
    words = sum(7 if g.joint else 3 for g in groups)
    return TritonPlan(grouped=grouped, grouped_choice=grouped_choice,
                      row_loads=tuple(row_loads), loads=tuple(loads),
                      groups=groups, lb_words=words, shifts=frozenset(shifts),
                      gather_next="next" in gathers, gather_prev="prev" in gathers,
                      persist=options.input_shift != "gather", shifted_state=shifted_state,
                      args=args, k_dense=k_dense, shift_g=shift_g)


def _loads(plan: Plan, options: Options):
    """The row values and tiles every symbol of the plan is read from, in symbol order."""
    ir = plan.ir
    kinds = {i.name: i for i in ir.inputs}
    params = {p.name for p in ir.params}
    split_mode = options.input_shift == "split"
    split_bases = {split_sym(s)[0] for s in plan.symbols
                   if split_mode and split_sym(s)[1] in ("next", "prev")
                   and split_sym(s)[0] in kinds and kinds[split_sym(s)[0]].shape == "NT"}
    row_loads, loads, loaded = [], [], set()
    split: dict[str, list] = {}  # base input -> its register shifts, in symbol order
    for sym in sorted(plan.symbols):
        b, shift = split_sym(sym)
        i = kinds.get(b)
        if i is not None and i.shape == "N" and not shift:
            row_loads.append(RowLoad(b, i.optional, i.default))
        elif i is not None and i.shape == "NT" and shift in TIME_SHIFTS:
            common = dict(src=b, optional=i.optional, default=i.default,
                          index=i.kind == "index")
            if split_mode and shift in ("next", "prev"):
                if b not in split:
                    split[b] = []
                    loads.append(b)  # the one grouped load of b, filled in below
                split[b].append((sym, shift == "next"))
                loaded.add(sym)
                continue
            if options.input_shift == "gather" and shift in ("next", "prev"):
                if b not in loaded:  # the aligned tile the shifted one is taken from
                    loads.append(TileLoad(sym=b, how="tile", **common))
                    loaded.add(b)
                loads.append(TileLoad(sym=sym, how="gather", shift=shift, **common))
            elif b in split_bases and not shift:
                pass  # the aligned tile comes from the grouped load
            elif sym not in loaded:
                loads.append(TileLoad(sym=sym, how="tile", shift=shift, **common))
            loaded.add(sym)
        elif b in params and shift in TIME_SHIFTS:
            loads.append(TileLoad(sym=f"{sym}__t", src=b, how="param", shift=shift))
    tiles = []
    for ld in loads:
        if isinstance(ld, str):  # a grouped load
            i = kinds[ld]
            ld = TileLoad(sym=ld, src=ld, how="split", optional=i.optional, default=i.default,
                          index=i.kind == "index", shifts=tuple(split[ld]))
        tiles.append(ld)
    return row_loads, tiles


def _groups(plan: Plan, options: Options) -> tuple[ScanGroup, ...]:
    """Scans in order, each alone or (``chain="joint"``) as the pair of a JointPlan."""
    joints = {j.first: j for j in plan.joints} if options.chain == "joint" else {}
    groups, skip, words = [], set(), 0
    for s in plan.scans:
        if s.name in skip:
            continue
        j = joints.get(s.name)
        if j is None:
            groups.append(ScanGroup((s.name,), False, words))
            words += 3
        else:
            groups.append(ScanGroup((s.name, j.second), True, words))
            skip.add(j.second)
            words += 7
    return tuple(groups)
