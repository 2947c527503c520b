"""Stage 5, CPU target: render a :class:`~scangen.plan.Plan` as numba kernels.

The CPU has no use for the GPU's parallel scan: one thread walks each row once in time, the
carried states in registers, so the work is O(T) with one read of every input and one write of
every output. Two kernels come from one step body: ``_rows`` (rows contiguous in time: each row
scanned in turn) and ``_tmajor`` (time-major buffers: time outermost, a tile of rows innermost,
so memory is read in order). The host side (:mod:`scangen.numbapath`) splits rows or tiles
across threads.

Every decision is made here; ``templates/numba_module.py.j2`` only lays the lines out. The
argument contract with the host side is the module's ``ARRAYS`` and ``FLAGS`` tuples: the kernel
takes one argument per entry of ``ARRAYS`` (inputs, params, outputs, in that order), a flat
array or, for a float param or an absent input, a float (``_nk.at`` reads either, and numba
compiles a kernel specialised to each mix), and one int64 array ``S`` holding four element
strides ``(s1, s2, st, sk)`` per array, then one 0/1 word per entry of ``FLAGS``
(``HAS_<optional input>``, ``STORE_<output>``).
"""
from __future__ import annotations

from types import SimpleNamespace as NS

from .plan import Block, Plan, split_sym
from .printers import NumbaPrinter, print_expr

# Time offsets of the shifted symbols (x__next is x one step later).
OFFSETS = {"": 0, "next": 1, "prev": -1, "next2": 2, "prev2": -2}
TIME = {"": "t", "next": "_tn", "prev": "_tp", "next2": "_tn2", "prev2": "_tp2"}


def _assigns(block: Block, table: dict, spec: str) -> list[str]:
    return [f"{v} = {print_expr(NumbaPrinter, e, table, spec)}" for v, e in block.assigns]


def numba_context(plan: Plan) -> NS:
    ir = plan.ir
    spec = ir.name
    kinds = {i.name: i for i in ir.inputs}
    params = {p.name for p in ir.params}
    states = [s.name for s in ir.scans]
    arrays = ([NS(name=i.name, role="input") for i in ir.inputs]
              + [NS(name=p, role="param") for p in params_in_order(ir)]
              + [NS(name=o.name, role="output") for o in ir.outputs])
    flags = [f"HAS_{i.name}" for i in ir.inputs if i.optional]
    flags += [f"STORE_{o.name}" for o in ir.outputs]
    n_s = 4 * len(arrays)
    # Per-kernel constants: the strides of every array and the flags, read once from S.
    consts = []
    for k, a in enumerate(arrays):
        consts += [f"{a.name}__s1 = S[{4 * k}]", f"{a.name}__s2 = S[{4 * k + 1}]",
                   f"{a.name}__st = S[{4 * k + 2}]", f"{a.name}__sk = S[{4 * k + 3}]"]
    consts += [f"{f} = S[{n_s + k}] != 0" for k, f in enumerate(flags)]
    offsets = [f"{a.name}__o = r1 * {a.name}__s1 + r2 * {a.name}__s2" for a in arrays]
    # time-major: each array's offset of the tile's first row, then one step of s2 per row
    tile_offsets = [f"{a.name}__ob = r1 * {a.name}__s1 + r2_0 * {a.name}__s2" for a in arrays]
    row_offsets = [f"{a.name}__o = {a.name}__ob + _j * {a.name}__s2" for a in arrays]
    row_loads = []  # [N] inputs: one value per row
    for i in ir.inputs:
        if i.shape == "N" and i.name in plan.symbols:
            row_loads.append(f"{i.name} = float(_nk.at({i.name}__a, {i.name}__o))")
    table = {s: s for s in plan.symbols}
    table.update({f"HAS_{i.name}": f"(1.0 if HAS_{i.name} else 0.0)"
                  for i in ir.inputs if i.optional})
    inits = [f"{s.name} = {print_expr(NumbaPrinter, s.init, table, spec)}" for s in plan.scans]

    shifts = set()
    step = []
    saved = [f"{s.name}__{'next' if ir.reverse else 'prev'} = {s.name}"
             for s in plan.scans if s.shifted]
    loads = []
    for sym in sorted(plan.symbols):
        b, shift = split_sym(sym)
        if b in kinds and kinds[b].shape == "NT":
            cast = "int" if kinds[b].kind == "index" else "float"
            loads.append(f"{sym} = {cast}(_nk.at({b}__a, {b}__o + {TIME[shift]} * {b}__st))")
            shifts.add(shift)
        elif b in params:
            loads.append(f"{sym} = float(_nk.at({b}__a, {b}__o + {TIME[shift]} * {b}__st))")
            shifts.add(shift)
        elif b in ("is_first", "is_last"):
            edge = "0" if b == "is_first" else "T - 1"
            off = OFFSETS[shift]
            at = "t" if not off else f"t {'+' if off > 0 else '-'} {abs(off)}"
            loads.append(f"{sym} = 1.0 if {at} == {edge} else 0.0")
    for g in plan.gathers:
        shifts.add(g.shift)
        loads.append(f"{g.var} = _nk.gather({g.src}__a, {g.src}__o + {TIME[g.shift]} * "
                     f"{g.src}__st, {g.src}__sk, K, {g.index})")
    sums = []
    for sp in plan.sums:
        kk = dict(table)
        k_loads = []
        for s in sp.k_symbols:
            b, shift = split_sym(s)
            shifts.add(shift)
            kk[s] = f"{s}__k"
            k_loads.append(f"{s}__k = float(_nk.at({b}__a, {b}__o + {TIME[shift]} * {b}__st + "
                           f"_k * {b}__sk))")
        kk.update({v: v for v, _ in sp.block.assigns})
        sums.append(NS(var=sp.var, loads=k_loads, assigns=_assigns(sp.block, kk, spec),
                       summand=print_expr(NumbaPrinter, sp.block.results[0][1], kk, spec)))
    scans = []
    for s in plan.scans:
        res = dict(s.block.results)
        scans.append(NS(name=s.name, assigns=_assigns(s.block, table, spec),
                        alpha=print_expr(NumbaPrinter, res["alpha"], table, spec),
                        beta=print_expr(NumbaPrinter, res["beta"], table, spec)))
    out_assigns = _assigns(plan.outputs, table, spec)
    outputs = [NS(name=o, code=print_expr(NumbaPrinter, e, table, spec))
               for o, e in plan.outputs.results]
    times = []
    for shift in sorted(shifts - {""}, key=lambda s: OFFSETS[s]):
        off = OFFSETS[shift]
        times.append(f"{TIME[shift]} = min(t + {off}, T - 1)" if off > 0
                     else f"{TIME[shift]} = max(t - {-off}, 0)")
    step = NS(saved=saved, times=times, loads=loads, sums=sums, scans=scans,
              out_assigns=out_assigns, outputs=outputs)
    return NS(arrays=arrays, array_args=", ".join(f"{a.name}__a" for a in arrays),
              array_names=tuple(a.name for a in arrays),
              array_roles=tuple(a.role for a in arrays), flags=tuple(flags), consts=consts,
              offsets=offsets, tile_offsets=tile_offsets, row_offsets=row_offsets,
              row_loads=row_loads, inits=inits, states=states, step=step,
              time=("T - 1 - _i" if ir.reverse else "_i"))


def params_in_order(ir) -> list[str]:
    return [p.name for p in ir.params]


NUMBA_TEMPLATE = "numba_module.py.j2"


def render_numba(plan: Plan, source: str) -> str:
    from . import __version__
    from .render import _comment, _env, _pylit, template_dir
    ir = plan.ir
    title = (ir.doc.strip().splitlines() or [ir.name])[0]
    ctx = dict(version=__version__, source=_comment(source), title=_pylit(title),
               function=ir.function, k=numba_context(plan))
    return _env(str(template_dir())).get_template(NUMBA_TEMPLATE).render(**ctx)
