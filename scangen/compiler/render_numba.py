"""Stage 5, CPU target: render a :class:`~scangen.compiler.plan.Plan` as numba kernels.

The CPU has no use for the GPU's parallel scan: one thread walks each row once in time, the
carried states in registers, so the work is O(T) with one read of every input and one write of
every output. Two kernels come from one plan: ``_rows`` (rows contiguous in time: groups of
four rows scanned together in phases, their FMA chains interleaved,
:func:`scangen.compiler.numba_groups.grouped_rows`; the rows left over one at a time in one
pass) and ``_tmajor`` (time-major buffers: time outermost, a
tile of rows innermost, so memory is read in order). The host side
(:mod:`scangen.runtime.numba`) splits rows or tiles across threads.

Every name a kernel defines starts with ``_`` (``_t``, ``_r1``, ``_F``, ``_np``) or is one
:mod:`scangen.compiler.validate` reserves (``T``, ``K``, ``R2``, ``HAS_x``, ``STORE_y``): a spec's
names start with a letter and are never reserved, so they never shadow the kernel's own.

Every decision is made here; ``templates/numba_module.py.j2`` only lays the lines out. The
argument contract with the host side is the module's ``ARRAYS`` and ``FLAGS`` tuples: the kernel
takes one argument per entry of ``ARRAYS`` (inputs, params, outputs, in that order) and one
int64 array ``_S`` of 0/1 words, one per entry of ``FLAGS`` (``HAS_<optional input>``,
``STORE_<output>``; ``_tmajor`` stores every output, those not asked for into a scratch
view). An argument is a NumPy view of the tensor's own storage over the canonical
index space, ``[R1, R2, T]`` for ``_rows`` and ``[R1, T, R2]`` for ``_tmajor`` (``[.., K]`` for
``[N, T, K]`` inputs, the time axis of size 1 for ``[N]`` inputs), so numba knows the innermost
stride of a contiguous view at compile time; or, for a float param or an absent input, a
number (``_nk.at`` reads either, and numba compiles a kernel for each mix). Both kernels also
take ``_Fz``, an empty array of the type ``_F`` they compute in (``_F = _Fz.dtype.type``; a type
argument is typed by numba's dispatcher in Python at every call): np.float32 (float32, float16
and bfloat16 calls, as the Triton kernels accumulate) or np.float64; every load and number is
cast to it.
"""
from __future__ import annotations

import re
from types import SimpleNamespace as NS

import sympy

from ..abi import OFFSETS, has_flag, helpers_hash, split_sym, store_flag
from .numba_carries import carries
from .numba_groups import (
    GROUP_ROWS,
    ORDER,
    TIME,
    grouped_rows,
    print_assigns,
    time_lines,
)
from .plan import Block, Plan
from .printers import NumbaPrinter, NumbaVectorPrinter, print_expr
from .templating import comment, pylit, render_template


def numba_context(plan: Plan, grouped: bool = True) -> NS:
    ir = plan.ir
    arrays = ([NS(name=i.name, role="input") for i in ir.inputs]
              + [NS(name=p.name, role="param") for p in ir.params]
              + [NS(name=o.name, role="output") for o in ir.outputs])
    flags = [has_flag(i.name) for i in ir.inputs if i.optional]
    flags += [store_flag(o.name) for o in ir.outputs]
    # the type the kernel computes in, from the dtype of an empty array: numba's dispatcher types
    # a class argument in Python, about 4 us a call (GAE 4 x 128's kernel call 5.9 -> 1.8 us)
    consts = ["_F = _Fz.dtype.type"]
    consts += [f"{f} = _S[{k}] != 0" for k, f in enumerate(flags)]
    # present(x) as a number, once a call: a conditional expression in a step is a branch,
    # which kept the row kernels' coefficient loop scalar (TD(lambda) 1024 x 1024 2.5 -> 1.6 ms)
    optional = [i.name for i in ir.inputs if i.optional]
    consts += [f"_hf_{n} = _F(1.0) if HAS_{n} else _F(0.0)" for n in optional]
    table = {s: s for s in plan.symbols}
    table.update({f"HAS_{n}": f"_hf_{n}" for n in optional})
    inits = [f"{s.name} = {print_expr(NumbaPrinter, s.init, table, ir.name)}"
             for s in plan.scans]
    cse = _one_cse(plan)  # the arithmetic of a step, the same in both loops
    rows = _step(plan, table, cse, time_major=False)
    tmajor = _step(plan, table, cse, time_major=True)
    # groups of rows (render_numba says where): one scan, no sum or gather
    grouped = grouped and len(plan.scans) == 1 and not plan.sums and not plan.gathers
    groups = grouped_rows(plan, table, cse) if grouped else None
    return NS(array_args=", ".join(f"{a.name}__a" for a in arrays),
              array_names=tuple(a.name for a in arrays),
              array_roles=tuple(a.role for a in arrays), flags=tuple(flags), consts=consts,
              inits=inits, states=[s.name for s in ir.scans], rows=rows, tmajor=tmajor,
              groups=groups, grouped=grouped, G=GROUP_ROWS, reverse=ir.reverse,
              time=("T - 1 - _i" if ir.reverse else "_i"),
              time_scales=[f"_ts_{o.name} = 1 if STORE_{o.name} else 0" for o in ir.outputs])


def _step(plan: Plan, table: dict, cse: tuple, time_major: bool) -> NS:
    """The lines of one step at ``t`` of one row.

    Rows (``_rows``): every load and store indexes the [R1, R2, T] views, and each store runs
    only where its output was asked for (``STORE_<output>``).

    Time-major (``_tmajor``): the step first takes a 1-D row view ``[n]`` of each array at
    each time index it reads (``views``; ``row_views`` once per tile for ``[N]`` inputs), and
    the loop over the tile's rows indexes those (``[N, T, K]`` inputs are indexed whole: their
    ``[n, K]`` row views made Retrace 2-3x slower). With the 3-D views indexed
    directly, LLVM checks the arrays for overlap once for the whole loop over time, and in a
    reverse scan that check fails, leaving the loop scalar (discounted returns 1024 x 64 in
    cache: 0.10 against 0.03 ms forward). Stores are unguarded so that the loop vectorises; the
    outputs nobody asked for go to a contiguous scratch [R1, 1, R2] (scangen.runtime.numba), at
    time index ``t * _ts_<output>`` (0 there; a strided view would make them scatters)."""
    ir, spec = plan.ir, plan.ir.name
    order = ORDER["tmajor" if time_major else "rows"]
    printer = NumbaVectorPrinter if time_major else NumbaPrinter
    kinds = {i.name: i for i in ir.inputs}
    params = {p.name for p in ir.params}
    views, row_views = {}, {}  # time-major: name -> the row view it names

    def view(b: str, shift) -> str:
        """The row view of array ``b`` at time ``shift`` (None: an [N] input's one step)."""
        name = f"_v_{b}" + (f"__{shift}" if shift else "")
        t = "0" if shift is None else TIME[shift]
        (row_views if shift is None else views)[name] = f"_nk.row({b}__a, _r1, {t}, _r2_0, _n)"
        return name

    def at(b: str, shift, k: str = "") -> str:
        if time_major and not k:
            return f"_nk.at1({view(b, shift)}, _j)"
        # rows; and the [.., K] views of [N, T, K] inputs, indexed whole in both kernels
        # (their [n, K] row views made Retrace's time-major loop 2-3x slower)
        t = "0" if shift is None else TIME[shift]
        return f"_nk.at{'k' if k else ''}({b}__a, {order.format(t=t)}{k})"

    row_loads = [f"{i.name} = _F({at(i.name, None)})" for i in ir.inputs
                 if i.shape == "N" and i.name in plan.symbols]
    shifts, loads = set(), []
    for sym in sorted(plan.symbols):
        b, shift = split_sym(sym)
        if (b in kinds and kinds[b].shape == "NT") or b in params:
            cast = "int" if b in kinds and kinds[b].kind == "index" else "_F"
            loads.append(f"{sym} = {cast}({at(b, shift)})")
            shifts.add(shift)
        elif b in ("is_first", "is_last"):
            edge = "0" if b == "is_first" else "T - 1"
            off = OFFSETS[shift]
            when = "_t" if not off else f"_t {'+' if off > 0 else '-'} {abs(off)}"
            loads.append(f"{sym} = _F(1.0) if {when} == {edge} else _F(0.0)")
    for g in plan.gathers:
        shifts.add(g.shift)
        loads.append(f"{g.var} = _F(_nk.gather({g.src}__a, {order.format(t=TIME[g.shift])}, "
                     f"K, {g.index}))")
    sums = []
    for sp in plan.sums:
        kk = dict(table)
        k_loads = []
        for s in sp.k_symbols:
            b, shift = split_sym(s)
            shifts.add(shift)
            kk[s] = f"{s}__k"
            k_loads.append(f"{s}__k = _F({at(b, shift, ', _k')})")
        kk.update({v: v for v, _ in sp.block.assigns})
        sums.append(NS(var=sp.var, loads=k_loads,
                       assigns=print_assigns(printer, sp.block.assigns, kk, spec),
                       summand=print_expr(printer, sp.block.results[0][1], kk, spec)))
    scan_cse, rest, out_exprs = cse
    hoisted = [] if time_major else _hoistable(plan, cse)
    hoist = _hoist(hoisted, table, spec, order)
    if hoisted:  # the step reads each hoisted value from its row's buffer
        loads += [f"{v} = _nk.at1(_hb_{v}, _t)" for v, _ in hoisted]
        names = {v for v, _ in hoisted}
        scan_cse = [(name, [(v, e) for v, e in assigns if v not in names], alpha, beta)
                    for name, assigns, alpha, beta in scan_cse]
        rest = [(v, e) for v, e in rest if v not in names]
    # values at the step before in the scan's order: carried, not recomputed
    carried, scan_cse, rest, out_exprs, loads, table = carries(
        plan, scan_cse, rest, out_exprs, loads, table, at, time_major)
    scans = [NS(name=name, assigns=print_assigns(printer, assigns, table, spec),
                alpha=print_expr(printer, alpha, table, spec),
                beta=print_expr(printer, beta, table, spec))
             for name, assigns, alpha, beta in scan_cse]
    out_assigns = print_assigns(printer, rest, table, spec)
    times = time_lines(shifts)
    saved = [f"{s.name}__{'next' if ir.reverse else 'prev'} = {s.name}"
             for s in plan.scans if s.shifted]
    if time_major:
        views.update({f"_w_{o}": f"_nk.row({o}__a, _r1, _t * _ts_{o}, _r2_0, _n)"
                      for o, _ in out_exprs})
    outputs = [NS(name=o, code=print_expr(printer, e, table, spec),
                  put=(f"_nk.put1(_w_{o}, _j, " if time_major
                       else f"_nk.put({o}__a, {order.format(t='_t')}, "),
                  guard="" if time_major else store_flag(o))
               for o, e in out_exprs]
    # time-major: the time indices and the row views are the step's, outside the loop over rows;
    # r2, the row's index, only where a [.., K] view needs it
    per_step = times + [f"{v} = {e}" for v, e in views.items()] if time_major else []
    if time_major and carried:  # the first step's time indices and the views its carries read
        words = set(re.findall(r"\w+", " ".join(carried.init_loads + carried.init_sets)))
        carried.init += times + [f"{v} = {e}" for v, e in views.items() if v in words]
    if time_major and (plan.sums or plan.gathers):
        loads.insert(0, "_r2 = _r2_0 + _j")
    return NS(hoist=hoist, row_loads=row_loads, saved=saved, times=[] if time_major else times,
              per_step=per_step, row_views=[f"{v} = {e}" for v, e in row_views.items()],
              loads=loads, sums=sums, scans=scans, out_assigns=out_assigns, outputs=outputs,
              carried=carried)


# Functions of a step's inputs alone that the row kernels compute for the whole row first, in
# a loop that vectorises (_hoistable): in the step loop, libm's exp is a call a step.
HOIST_FUNCTIONS = (sympy.exp,)


def _hoistable(plan: Plan, cse: tuple) -> list:
    """The temporaries of a row kernel's step that call a :data:`HOIST_FUNCTIONS` function of
    ``[N, T]`` inputs and params alone (at any time offset; no state, no ``is_first`` /
    ``is_last``, no gather or sum): V-trace's ratio exp(log_pi_target - log_pi_behavior).

    ``_rows`` computes them for every step of a row before scanning it, in a loop LLVM
    vectorises (``_nk.exp_as``), into a buffer of T values a temporary, which the step then
    reads. In the step loop each was a libm call, more than half of V-trace's step: V-trace
    rows 1.2x-1.6x faster (1024 x 1024: 8.5 -> 5.8 ms; bench/CPU.md). The buffer is T values
    a temporary a call (a row's worth). Blocks of 256 steps (buffers in L1) measured slower:
    splitting the step loop into blocks cost more than the buffer's traffic."""
    ir = plan.ir
    loads = {i.name for i in ir.inputs if i.shape == "NT" and i.kind != "index"}
    loads |= {p.name for p in ir.params}
    scan_cse, rest, _ = cse
    out = []
    for v, e in [a for _, assigns, _, _ in scan_cse for a in assigns] + list(rest):
        names = {x.name for x in e.free_symbols}
        if e.has(*HOIST_FUNCTIONS) and names and all(split_sym(n)[0] in loads for n in names):
            out.append((v, e))
    return out


def _hoist(hoisted: list, table: dict, spec: str, order: str) -> NS | None:
    """The lines of the row kernels' loop that fills the buffers of ``hoisted`` at each step
    ``t`` of a row: its time indices, its loads and one store a temporary."""
    if not hoisted:
        return None
    syms = sorted({x.name for _, e in hoisted for x in e.free_symbols})
    times = time_lines({split_sym(n)[1] for n in syms})
    loads = [f"{n} = _F(_nk.at({split_sym(n)[0]}__a, {order.format(t=TIME[split_sym(n)[1]])}))"
             for n in syms]
    fills = [f"_nk.put1(_hb_{v}, _t, {print_expr(NumbaVectorPrinter, e, table, spec)})"
             for v, e in hoisted]
    return NS(buffers=[f"_hb_{v} = _np.empty(T, _F)" for v, _ in hoisted],
              lines=times + loads + fills)


def _one_cse(plan: Plan):
    """The scans' updates and the outputs of one step with their common subexpressions taken
    once over the whole step (the plan takes them per block, which suits the GPU's separate
    passes; a sequential step holds every value at once: V-trace's ratio exp(...) is then
    computed once, not twice). A temporary that reads a scan's state is emitted after that
    scan's update; the states always mean their value at step t, as in the spec.

    Returns ([(scan, [(temp, expr)], alpha, beta)], the remaining [(temp, expr)],
    [(output, expr)]), for each kernel to print."""
    results = []
    for s in plan.scans:
        res = dict(_inlined(s.block))
        results += [res["alpha"], res["beta"]]
    outs = _inlined(plan.outputs)
    temps, reduced = sympy.cse(results + [e for _, e in outs], optimizations=None, order="none",
                               symbols=sympy.numbered_symbols("_c"))
    states = {s.name for s in plan.scans}
    names_of_temps = {v.name for v, _ in temps}
    pending, done, updated = list(temps), set(), set()

    def ready():
        out = []
        for v, e in list(pending):
            names = {x.name for x in e.free_symbols}
            if (names & states) <= updated and (names & names_of_temps) <= done:
                out.append((v.name, e))
                done.add(v.name)
                pending.remove((v, e))
        return out

    scans = []
    for k, s in enumerate(plan.scans):
        scans.append((s.name, ready(), reduced[2 * k], reduced[2 * k + 1]))
        updated.add(s.name)
    rest = ready()
    assert not pending, pending
    return scans, rest, list(zip((n for n, _ in outs), reduced[2 * len(plan.scans):]))


def _inlined(block: Block) -> list:
    """A block's results with its temporaries substituted back."""
    sub = {}
    for v, e in block.assigns:
        sub[sympy.Symbol(v)] = e.xreplace(sub)
    return [(n, e.xreplace(sub)) for n, e in block.results]


NUMBA_TEMPLATE = "numba_module.py.j2"


def render_numba(plan: Plan, source: str, grouped: bool = True) -> str:
    """The numba module of ``plan``. Its row kernel scans groups of rows
    (:func:`scangen.compiler.numba_groups.grouped_rows`) where the plan has one scan and no
    ``sum`` or ``gather``; otherwise, and with ``grouped=False`` (the backward modules), every
    row in one pass. One scan is one FMA chain a row, bound by its latency, which four
    interleaved chains hide (GAE 1.3x-1.9x, V-trace 1.9x-2.4x faster). Two chained scans
    already overlap two chains in one pass, and the phases' extra passes over a chunk cost
    more than the groups gain (masked GAE 1.2x-1.5x slower grouped); so did Retrace's sums and
    gathers (1.3x-1.4x). The backward's long steps (V-trace's eleven outputs) would double
    their compile time for calls rarer than the forward's."""
    from .. import __version__
    ir = plan.ir
    title = (ir.doc.strip().splitlines() or [ir.name])[0]
    k = numba_context(plan, grouped)
    return render_template(NUMBA_TEMPLATE, version=__version__, source=comment(source),
                           title=pylit(title), function=ir.function, k=k,
                           helpers=helpers_hash())


