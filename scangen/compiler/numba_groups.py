"""Stage 5, CPU target: the row kernel's groups of rows (:func:`grouped_rows`), and the pieces
of a numba step both kernels of ``scangen.compiler.render_numba`` print (time indices, assigns).

A row alone is a chain of one FMA a step, ``A = alpha + beta * A``, whose latency bounds the
loop; four rows scanned together, their coefficients computed first in loops that carry no
state and their chains then interleaved, run 1.3x-1.9x faster (GAE and V-trace, bench/CPU.md).
"""
from __future__ import annotations

from types import SimpleNamespace as NS

import sympy

from ..abi import OFFSETS, split_sym
from .plan import Plan
from .printers import NumbaVectorPrinter, print_expr

TIME = {"": "_t", "next": "_tn", "prev": "_tp", "next2": "_tn2", "prev2": "_tp2"}
# The index of step ``{t}`` of the row (r1, r2) in each kernel's views.
ORDER = {"rows": "_r1, _r2, {t}", "tmajor": "_r1, {t}, _r2"}


def print_assigns(printer, assigns, table: dict, spec: str) -> list[str]:
    return [f"{v} = {print_expr(printer, e, table, spec)}" for v, e in assigns]


def time_lines(shifts: set, clamp: bool = True) -> list[str]:
    """The time index of each shift a step reads (``_tn = min(t + 1, T - 1)``), clamped to the
    row: the kernels read a row's edge where a neighbour falls outside it. ``clamp=False``:
    unclamped (``_tn = t + 1``), for the steps whose neighbours lie inside the row."""
    out = []
    for shift in sorted(shifts - {""}, key=lambda s: OFFSETS[s]):
        off = OFFSETS[shift]
        if not clamp:
            out.append(f"{TIME[shift]} = _t {'+' if off > 0 else '-'} {abs(off)}")
        else:
            out.append(f"{TIME[shift]} = min(_t + {off}, T - 1)" if off > 0
                       else f"{TIME[shift]} = max(_t - {-off}, 0)")
    return out


# The rows a row kernel scans together (grouped_rows): their chains of one FMA a step interleave.
GROUP_ROWS = 4
# Temporaries a later phase of grouped_rows reads from a buffer rather than computing again.
BUFFERED_FUNCTIONS = (sympy.exp, sympy.log)


def grouped_rows(plan: Plan, table: dict, cse: tuple) -> NS:
    """The row kernel's form for groups of :data:`GROUP_ROWS` rows, a chunk of steps of each
    at a time (the kernel's argument ``_CH``, ``scangen.runtime.numba.ROW_CHUNK``), in phases:

    - for each scan in turn, a loop over each row's steps in memory order that computes the
      scan's coefficients (alpha, beta) into two buffers: it carries no state, so nothing
      chains one step to the next; it may read the states of earlier scans;
    - the chain, ``A = alpha + beta * A`` over the group's rows together in the scan's
      direction, each state written over its alpha: the rows' chains are independent, so the
      core overlaps their FMA latencies (a row alone waits one FMA latency a step);
    - one loop in memory order that computes every output asked for from the inputs and the
      state buffers.

    scangen.compiler.render_numba uses it for plans of one scan without ``sum`` or ``gather``.

    Temporaries a later phase needs are computed again there (a load or two from L1), except
    :data:`BUFFERED_FUNCTIONS` calls, which go through a buffer. A phase's loop over steps runs
    in two parts where it reads neighbours (``x__next``): the steps whose neighbours lie inside
    the row, with unclamped indices (clamped ones everywhere ran GAE 2x slower), then the few
    at the row's edges, with clamped ones.

    Buffers hold a row's chunk at ``_os + j + SO`` (``_os = q * (C + 1)``): ``SO`` is 0 for a
    reverse scan, whose carry-in (the state after the later chunk) sits at slot ``n``, and 1
    for a forward scan, whose carry-in sits at slot 0; so the state one step nearer the scan's
    start (``A__next`` of a reverse scan) is always the neighbouring slot.

    Returns the lines the template lays out (``templates/numba_module.py.j2``, ``_rows``)."""
    ir, spec = plan.ir, plan.ir.name
    printer = NumbaVectorPrinter
    kinds = {i.name: i for i in ir.inputs}
    params = {p.name for p in ir.params}
    scan_cse, rest, out_exprs = cse
    temps = {}
    for _, assigns, _, _ in scan_cse:
        temps.update(assigns)
    temps.update(rest)
    states = [s.name for s in plan.scans]
    near = "next" if ir.reverse else "prev"
    shifted_states = {f"{s}__{near}": s for s in states}
    assert not plan.sums and not plan.gathers, "scangen.compiler.render_numba groups neither"
    so = 0 if ir.reverse else 1
    slot = f"_j + {so}" if so else "_j"
    near_slot = "_j + 1" if ir.reverse else "_j"

    def names(e) -> set:
        return {x.name for x in e.free_symbols}

    def deps(n: str) -> set:
        return names(temps[n]) if n in temps else set()

    def closure(roots: set, stop: set) -> set:
        need, stack = set(), list(roots)
        while stack:
            n = stack.pop()
            if n in need:
                continue
            need.add(n)
            if n not in stop:
                stack.extend(deps(n))
        return need

    def costly(n: str) -> bool:
        return n in temps and temps[n].has(*BUFFERED_FUNCTIONS)

    # the phases' roots: each scan's coefficients, then the outputs
    roots = [names(alpha) | names(beta) for _, _, alpha, beta in scan_cse]
    roots.append(set().union(*(names(e) for _, e in out_exprs)))
    first_need = [closure(r, set()) for r in roots]
    # a costly value needed by more than one phase: computed by the first, buffered for the rest
    buffered, owner = set(), {}
    for k, need in enumerate(first_need):
        for n in sorted(need):
            if costly(n):
                if n in owner:
                    buffered.add(n)
                else:
                    owner[n] = k

    def steps(k: int, r: set, finals: list) -> NS:
        """The loop body of phase ``k`` (roots ``r``; ``finals``: its last lines)."""
        mine = sorted(n for n in buffered if owner[n] == k)
        need = closure(r, {n for n in buffered if owner[n] != k})
        loads, shifts, views = [], set(), {}  # views: each row's [T] view of an array
        for n in sorted(need):
            b, shift = split_sym(n)
            if n in buffered and owner[n] != k:
                loads.append(f"{n} = _nk.at1(_tb_{n}, _o + _j)")
            elif n in states:
                loads.append(f"{n} = _nk.at1(_al_{n}, _os + {slot})")
            elif n in shifted_states:
                loads.append(f"{n} = _nk.at1(_al_{shifted_states[n]}, _os + {near_slot})")
            elif (b in kinds and kinds[b].shape == "NT") or b in params:
                cast = "int" if b in kinds and kinds[b].kind == "index" else "_F"
                views[f"_v_{b}"] = f"_nk.row({b}__a, _r1, _r2, 0, T)"
                loads.append(f"{n} = {cast}(_nk.at1(_v_{b}, {TIME[shift]}))")
                shifts.add(shift)
            elif b in ("is_first", "is_last"):
                edge = "0" if b == "is_first" else "T - 1"
                off = OFFSETS[shift]
                when = "_t" if not off else f"_t {'+' if off > 0 else '-'} {abs(off)}"
                loads.append(f"{n} = _nk.where({when} == {edge}, _F(1.0), _F(0.0))")
        body = [v for v in temps if v in need and not (v in buffered and owner[v] != k)]
        assigns = print_assigns(printer, [(v, temps[v]) for v in body], table, spec)
        assigns += [f"_nk.put1(_tb_{n}, _o + _j, {n})" for n in mine] + finals
        offs = [OFFSETS[s] for s in shifts]
        lo_edge, hi_edge = max([0] + [-o for o in offs]), max([0] + offs)
        return NS(views=[f"{v} = {e}" for v, e in sorted(views.items())],
                  loads=loads, assigns=assigns,
                  inner=time_lines(shifts, clamp=False), edge=time_lines(shifts),
                  lo_edge=lo_edge, hi_edge=hi_edge, edges=bool(lo_edge or hi_edge))

    scans = []
    for k, (name, _, alpha, beta) in enumerate(scan_cse):
        finals = [f"_nk.put1(_al_{name}, _os + {slot}, {print_expr(printer, alpha, table, spec)})",
                  f"_nk.put1(_be_{name}, _os + {slot}, {print_expr(printer, beta, table, spec)})"]
        scans.append(NS(name=name, steps=steps(k, roots[k], finals)))
    # one loop for every output: a store a step only where the output was asked for (a loop
    # an output measured no faster, and its text is the kernel's compile time)
    finals = [f"if STORE_{o}: _nk.put1(_w_{o}, _j, {print_expr(printer, e, table, spec)})"
              for o, e in out_exprs]
    outputs = steps(len(scan_cse), roots[-1], finals)
    return NS(scans=scans, outputs=outputs, stored=[o for o, _ in out_exprs],
              buffers=[f"_tb_{n} = _np.empty(_G * _C, _F)" for n in sorted(buffered)],
              chain="_n - 1 - _i" if ir.reverse else "_i", so=so,
              chunk=(["_t0 = max(T - _C * (_ci + 1), 0)", "_n = T - _C * _ci - _t0"] if ir.reverse
                     else ["_t0 = _C * _ci", "_n = min(_C, T - _t0)"]),
              carry_slot="_n" if ir.reverse else "0", slot=slot)
