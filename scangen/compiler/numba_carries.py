"""The values a numba kernel's step carries from the step before it instead of computing them
again (scangen.compiler.render_numba builds the steps; templates/numba_module.py.j2 prints the
carried lines)."""
from __future__ import annotations

from types import SimpleNamespace as NS

import sympy

from ..abi import OFFSETS, SHIFT_OF, split_sym
from .expr import Indicator, Where
from .numba_groups import time_lines
from .plan import Plan
from .printers import NumbaPrinter, NumbaVectorPrinter, print_expr


def carries(plan: Plan, scan_cse: list, rest: list, out_exprs: list, loads: list, table: dict,
            at, time_major: bool = False) -> tuple:
    """The values a one-pass step carries from the step before it instead of recomputing.

    The row kernel walks a row in the scan's order, so a reverse scan has just computed step
    t + 1 when it reaches t (a forward scan, t - 1). Every largest subexpression of the step
    that reads only inputs, params and gathers at that neighbouring step (Retrace's
    ``lambda_ * min(c_bar, ratio)`` at t + 1, with its gather and division) becomes a temporary
    ``_shN``, read from ``_shN__c``: before the row's loop, the value the row's first step
    sees (its clamped neighbour is itself), from that step's loads; at the end of every step,
    the same subexpression at offset 0, from the step's own loads (which LLVM shares with the
    step's other uses of them). The neighbour loads that only such subexpressions read leave
    the loop. The same operations on the same values: the same results (Retrace rows 1.07x
    faster, bench/CPU.md).

    Time-major (``_tmajor``), each row of the tile carries its own: ``_shN__c`` is an array of
    ``_TB`` values, set for every row before the loop over time (``init`` names the first
    step, ``init_loads`` and ``init_sets`` run in a loop over the tile's rows with that step's
    views) and read and written at ``[_j]``.

    Returns (the lines, or None; the scans', temporaries' and outputs' expressions with the
    carried subexpressions replaced; the loads; the symbol table)."""
    off = 1 if plan.ir.reverse else -1
    kinds = {i.name: i for i in plan.ir.inputs}
    loadable = {n for n, i in kinds.items() if i.shape == "NT"} | {p.name for p in plan.ir.params}
    gathers = {g.var: g for g in plan.gathers}

    def unshift(name: str):
        """The offset-0 symbol of a symbol at the carried offset, or None."""
        if name in gathers:
            g = gathers[name]
            ib, ish = split_sym(g.index)
            if OFFSETS[g.shift] != off or OFFSETS[ish] != off:
                return None
            return next((h.var for h in plan.gathers
                         if h.src == g.src and h.shift == "" and h.index == ib), None)
        b, sh = split_sym(name)  # index inputs only as a gather's index
        ok = (sh and OFFSETS[sh] == off and b in loadable
              and (b not in kinds or kinds[b].kind != "index"))
        return b if ok else None

    found = []

    def walk(e):
        if not isinstance(e, sympy.Basic) or e.is_Atom:
            return
        syms = e.free_symbols
        if syms and all(unshift(x.name) for x in syms):
            if e not in found:
                found.append(e)
            return
        for a in e.args:
            walk(a)

    exprs = ([e for _, assigns, a, b in scan_cse for e in (*(x for _, x in assigns), a, b)]
             + [e for _, e in rest] + [e for _, e in out_exprs])
    for e in exprs:
        walk(e)
    if not found:
        return None, scan_cse, rest, out_exprs, loads, table
    scan_cse0, rest0, out_exprs0, table0 = scan_cse, rest, out_exprs, table
    names = {e: sympy.Symbol(f"_sh{k}") for k, e in enumerate(found)}
    sub = lambda e: e.xreplace(names)
    scan_cse = [(n, [(v, sub(x)) for v, x in assigns], sub(a), sub(b))
                for n, assigns, a, b in scan_cse]
    rest = [(v, sub(x)) for v, x in rest]
    out_exprs = [(o, sub(x)) for o, x in out_exprs]
    table = dict(table)
    table.update({str(v): str(v) for v in names.values()})
    # the offset-0 loads the carries need that the step does not make yet
    back = {e: e.xreplace({x: sympy.Symbol(unshift(x.name)) for x in e.free_symbols})
            for e in found}
    have = {line.split(" = ", 1)[0] for line in loads}
    extra = []
    for b in sorted({x.name for e in back.values() for x in e.free_symbols} - have):
        cast = "int" if b in kinds and kinds[b].kind == "index" else "_F"
        extra.append(f"{b} = {cast}({at(b, '')})")
        table[b] = b
    # neighbour loads that only the carried subexpressions read leave the loop
    needed = set()
    for e in ([x for _, assigns, a, b in scan_cse for x in (*(y for _, y in assigns), a, b)]
              + [x for _, x in rest] + [x for _, x in out_exprs] + list(back.values())):
        needed |= {x.name for x in e.free_symbols}
    for sp in plan.sums:  # the sums' summands read step symbols besides their own [.., K] loads
        for _, x in (*sp.block.assigns, *sp.block.results):
            needed |= {y.name for y in x.free_symbols}
    for g in plan.gathers:  # a gather kept in the step reads its index
        if g.var in needed:
            needed.add(g.index)
    pre = {x.name for e in found for x in e.free_symbols}  # what the carried values read
    pre |= {g.index for g in plan.gathers if g.var in pre}
    if time_major and not worth_carrying(found, gathers, pre - needed):
        return None, scan_cse0, rest0, out_exprs0, loads, table0
    kept = [line for line in loads if line.split(" = ", 1)[0] not in pre - needed]
    # before the row's loop: the carries as the first step reads them (its clamped neighbour,
    # itself), from loads of that step
    first_t = "T - 1" if plan.ir.reverse else "0"
    printer = NumbaVectorPrinter if time_major else NumbaPrinter
    spec = plan.ir.name
    head = [f"_t = {first_t}  # the row's first step", *time_lines({SHIFT_OF[off]})]
    init_loads = [line for line in loads if line.split(" = ", 1)[0] in pre]
    at_j = "[_j]" if time_major else ""
    init_sets = [f"{names[e]}__c{at_j} = {print_expr(printer, e, table, spec)}" for e in found]
    later = [f"{names[e]} = {names[e]}__c{at_j}" for e in found]
    end = [f"{names[e]}__c{at_j} = {print_expr(printer, back[e], table, spec)}" for e in found]
    carried = NS(later=later, end=end, names=[str(names[e]) for e in found])
    if time_major:  # render_numba adds the first step's time indices and the views it reads
        if plan.sums or plan.gathers:
            init_loads.insert(0, "_r2 = _r2_0 + _j")
        carried.init, carried.init_loads, carried.init_sets = head[:1], init_loads, init_sets
    else:
        carried.init = head + init_loads + init_sets
    return carried, scan_cse, rest, out_exprs, kept + extra, table


SELECTS = (Where, Indicator, sympy.Piecewise)  # functions the printers write as selects


def worth_carrying(found: list, gathers: dict, removed: set) -> bool:
    """Whether a time-major step's carries pay: there each is an array of the tile's rows, a
    load and a store a step, against a vectorised recomputation. They do where a carried value
    holds a gather, a division or a function call (Retrace's gather and division: time-major
    1.11x-1.25x faster; V-trace's adjoint's exp: 1.27x-1.59x), or where they take more
    neighbour loads out of the step than they add arrays (discounted returns' adjoint:
    max(terminateds, truncateds) at t - 1 for two flag loads, 1.33x-1.41x); not where they add
    arrays (masked GAE's adjoint: three carries for one flag load, 0.84x-0.98x).
    bench/results/cpu-2026-12-02-g-tm-carries-ab.txt."""
    def costly(e) -> bool:
        return (any(x.name in gathers for x in e.free_symbols)
                or any(isinstance(a, sympy.Function) and not isinstance(a, SELECTS)
                       for a in sympy.preorder_traversal(e))  # a call; a where is a select
                or any(a.is_Pow and a.exp.is_negative for a in sympy.preorder_traversal(e)))
    return any(costly(e) for e in found) or len(removed) > len(found)
