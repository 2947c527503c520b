"""Stage 4: plan the generated code from the IR, independent of the target language.

* ``next(e, fill)`` / ``prev(e, fill)`` become ``where(is_last, fill, e')`` where ``e'`` reads
  every per-step symbol at the neighbouring step (``x__next``), so a shifted input is one more
  load and a shifted state is an in-register shift of the scanned tile.
* ``gather`` and ``sum`` over the trailing axis are pulled out into named temporaries computed
  before the scans (they only read inputs).
* Each stage (the reductions, every scan, the outputs) gets common subexpressions eliminated, so
  the printed code computes every shared term once.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .expr import Gather, KSum, Next, Prev, Present, Where
from .ir import IR
from ..abi import split_sym
from .lower import Nonlinear, affine

SHIFT = {Next: "next", Prev: "prev"}


@dataclass(frozen=True)
class Block:
    """Straight-line code: temporaries ``assigns`` then the named ``results``."""

    assigns: tuple[tuple[str, sympy.Expr], ...]
    results: tuple[tuple[str, sympy.Expr], ...]


@dataclass(frozen=True)
class GatherPlan:
    var: str
    src: str      # the [N, T, K] input
    index: str    # the index input symbol (possibly shifted)
    shift: str    # "" | "next" | "prev"


@dataclass(frozen=True)
class SumPlan:
    var: str
    block: Block             # one result: the summand, in the [BN, BT, BK] context
    k_symbols: tuple[str, ...]   # trailing-axis symbols it reads (possibly shifted)


@dataclass(frozen=True)
class ScanPlan:
    name: str
    block: Block             # results: alpha, beta
    init: sympy.Expr
    shifted: bool            # whether the neighbouring state is read later


@dataclass(frozen=True)
class JointPlan:
    """Two consecutive scans that may run as one scan over the state vector (second, first):
    the second scan's alpha is affine in the first scan's state one step nearer the carry, and
    nothing else reads that shifted state. With x_t = (second_t, first_t) and x' the state one
    step nearer the carry, x_t = [[p, q], [0, r]] x' + (u, v): p, r the scans' betas, v the
    first's alpha, u + q * first' the second's alpha. One scan of (p, q, r, u, v) replaces the
    first scan's exclusive scan and the second scan that waits for it."""

    first: str
    second: str
    block: Block             # results: p, q, r, u, v


@dataclass(frozen=True)
class Plan:
    ir: IR
    gathers: tuple[GatherPlan, ...]
    sums: tuple[SumPlan, ...]
    scans: tuple[ScanPlan, ...]
    outputs: Block
    symbols: frozenset[str]  # every symbol the code reads (after shift lowering)
    joints: tuple[JointPlan, ...] = ()  # scan pairs that may run jointly (render OPTIONS chain)

    def uses(self, name: str) -> bool:
        return name in self.symbols


def _shift_symbols(ir: IR) -> set[str]:
    """Per-step names that have a value at the neighbouring step."""
    names = {i.name for i in ir.inputs if i.shape != "N"}
    names |= {p.name for p in ir.params} | {"is_first", "is_last"} | {s.name for s in ir.scans}
    return names


def lower_shifts(expr, shiftable: set[str]):
    def shifted(e, suffix):
        return e.xreplace({s: sympy.Symbol(f"{s.name}__{suffix}") for s in e.free_symbols
                           if s.name in shiftable})

    def visit(e):
        if isinstance(e, (Next, Prev)):
            suffix = SHIFT[type(e)]
            edge = sympy.Symbol("is_last" if suffix == "next" else "is_first")
            return Where(edge, visit(e.args[1]), shifted(visit(e.args[0]), suffix))
        if isinstance(e, Present):
            return sympy.Symbol(f"HAS_{e.args[0].name}")
        if not e.args:
            return e
        return e.func(*[visit(a) for a in e.args])

    return visit(expr)


class _Temps:
    def __init__(self):
        self.n = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.n += 1
        return sympy.Symbol(f"_e{self.n}")


def _block(results: list[tuple[str, sympy.Expr]], temps: _Temps) -> Block:
    exprs = [e for _, e in results]
    assigns, reduced = sympy.cse(exprs, symbols=temps, optimizations=None, order="none")
    return Block(tuple((s.name, e) for s, e in assigns),
                 tuple((n, e) for (n, _), e in zip(results, reduced)))


def plan(ir: IR) -> Plan:
    shiftable = _shift_symbols(ir)
    k_inputs = {i.name for i in ir.inputs if i.shape == "NTK"}
    temps = _Temps()
    gathers: dict[Gather, GatherPlan] = {}
    sums: dict[KSum, SumPlan] = {}

    def extract(expr):
        expr = lower_shifts(expr, shiftable)
        for g in sorted(expr.atoms(Gather), key=sympy.default_sort_key):
            src, idx = g.args
            base, shift = split_sym(src.name)
            gathers.setdefault(g, GatherPlan(f"_gather{len(gathers)}", base, idx.name, shift))
        for s in sorted(expr.atoms(KSum), key=sympy.default_sort_key):
            if s not in sums:
                ks = tuple(sorted(x.name for x in s.args[0].free_symbols
                                  if split_sym(x.name)[0] in k_inputs))
                sums[s] = SumPlan(f"_sum{len(sums)}", _block([("summand", s.args[0])], temps), ks)
        return expr.xreplace({g: sympy.Symbol(p.var) for g, p in gathers.items()}
                             | {s: sympy.Symbol(p.var) for s, p in sums.items()})

    scan_exprs = [(s, extract(s.alpha), extract(s.beta)) for s in ir.scans]
    out_exprs = [(o.name, extract(o.expr)) for o in ir.outputs]
    every = [e for _, a, b in scan_exprs for e in (a, b)] + [e for _, e in out_exprs]
    every += [p.block.results[0][1] for p in sums.values()]
    every += [sympy.Symbol(f"{p.src}__{p.shift}" if p.shift else p.src) for p in gathers.values()]
    every += [sympy.Symbol(p.index) for p in gathers.values()]
    inits = [lower_shifts(s.init, shiftable) for s in ir.scans]  # present(x) -> HAS_x
    every += inits
    symbols = frozenset(s.name for e in every for s in e.free_symbols)
    scans = tuple(ScanPlan(s.name, _block([("alpha", a), ("beta", b)], temps), init,
                           any(f"{s.name}__{d}" in symbols for d in ("next", "prev")))
                  for (s, a, b), init in zip(scan_exprs, inits))
    return Plan(ir, tuple(gathers.values()), tuple(sums.values()), scans,
                _block(out_exprs, temps), symbols | {s.name for s in ir.scans},
                _joints(ir, scan_exprs, every, temps))


def _joints(ir: IR, scan_exprs, every, temps) -> tuple[JointPlan, ...]:
    """The consecutive scan pairs of :class:`JointPlan`, each scan in at most one pair.
    ``every``: every expression the code evaluates, the scans' alpha and beta first, in order."""
    nearer = "next" if ir.direction == "reverse" else "prev"
    out, used = [], set()
    for k in range(1, len(scan_exprs)):
        (first, alpha1, beta1), (second, alpha2, beta2) = scan_exprs[k - 1], scan_exprs[k]
        if first.name in used:
            continue
        shifted = sympy.Symbol(f"{first.name}__{nearer}")
        rest = every[:2 * k] + every[2 * k + 1:]  # all but the second scan's alpha
        reads = {x.name for e in rest for x in e.free_symbols}
        own = {f"{second.name}__next", f"{second.name}__prev", first.name}
        if (shifted not in alpha2.free_symbols or shifted.name in reads
                or own & {x.name for e in (alpha2, beta2) for x in e.free_symbols}
                or any(f"{second.name}__{d}" in reads for d in ("next", "prev"))):
            continue
        try:
            u, q = affine(alpha2, shifted)
        except Nonlinear:
            continue
        out.append(JointPlan(first.name, second.name, _block(
            [("p", beta2), ("q", q), ("r", beta1), ("u", u), ("v", alpha1)], temps)))
        used |= {first.name, second.name}
    return tuple(out)
