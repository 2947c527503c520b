"""Stage 5: render a :class:`~scangen.compiler.plan.Plan` into Python source through the Jinja templates.

Every decision is made here and handed to the templates in one context object: which loads,
which temporaries, how each expression prints in each context, which way time runs. The
templates only lay the pieces out. An op renders as two modules: the op module (``module.py.j2``:
the torch path, ``OP``, the public function; no Triton) and its Triton kernels
(``triton_module.py.j2``), the companion ``<module>_triton`` (scangen.abi.triton_kernels).
"""
from __future__ import annotations

import functools
import re
from types import SimpleNamespace as NS

from .. import __version__, abi
from ..abi import split_sym
from .expr import Present
from .ir import IR
from .options import Options
from .plan import Block, Plan
from .printers import TorchPrinter, TritonPrinter, print_expr
from .templating import PACKAGE, comment, pylit, render_template
from .tiling import plan_triton

TEMPLATE = "module.py.j2"                # the op module: torch path, OP, public function
TRITON_TEMPLATE = "triton_module.py.j2"  # its companion <module>_triton: the Triton kernels


class _Symbols:
    """How each symbol prints in the Triton tile, the Triton ``sum`` tile and torch."""

    def __init__(self, ir: IR, plan: Plan):
        self.ir, self.plan = ir, plan
        self.role = {i.name: i.shape for i in ir.inputs}
        self.params = {p.name for p in ir.params}

    def base(self, sym: str) -> str:
        return split_sym(sym)[0]

    def triton_tile(self, sym):
        b = self.base(sym)
        if self.role.get(b) == "N":
            return f"{b}[:, None]"
        if b in self.params:
            return f"{sym}__t"
        return sym

    def triton_k(self, sym):
        b = self.base(sym)
        if self.role.get(b) == "NTK":
            return f"{sym}__k"
        if self.role.get(b) == "N":
            return f"{b}[:, None, None]"
        if sym.startswith("HAS_"):
            return sym
        return f"{self.triton_tile(sym)}[:, :, None]"

    def torch_k(self, sym):
        return sym if self.role.get(self.base(sym)) == "NTK" else f"_tp.kx({sym})"

    def table(self, fn, extra=()):
        names = set(self.plan.symbols) | set(extra)
        return {s: fn(s) for s in names}


def _assigns(block: Block, printer, table, name):
    return [NS(var=v, code=print_expr(printer, e, table, name)) for v, e in block.assigns]


TVAR = {"": "_t", "next": "_t_next", "prev": "_t_prev", "next2": "_t_next2", "prev2": "_t_prev2"}


def _tile_load(ld) -> NS:
    """The template's view of one :class:`~scangen.compiler.tiling.TileLoad`."""
    b = ld.src
    # tile_call: an optional input or a param without shifts or an index dtype, which the stream
    # and look-back kernels load in one call (scangen.kernels.common.load_tile)
    if ld.how == "param":
        return NS(var=ld.sym, ptr=f"{b}__ptr", base=f"{b}__row", t=TVAR[ld.shift],
                  st=f"{b}__st", has=abi.tensor_flag(b), default=b, cast=".to(ACC)",
                  gather_from="", tile_call=True, split_call=False)
    common = dict(ptr=f"{b}__ptr", base=f"{b}__row", st=f"{b}__st",
                  has=abi.has_flag(b) if ld.optional else "", default=repr(ld.default),
                  cast="" if ld.index else ".to(ACC)", gather_from="", tile_call=False,
                  split_call=False)
    if ld.how == "split":  # split_call: optional, not an index: the helpers take its HAS flag
        return NS(var=ld.sym, shifts=[NS(var=v, next=nx) for v, nx in ld.shifts],
                  **{**common, "split_call": ld.optional and not ld.index})
    if ld.how == "gather":
        edge = "BLOCK_T" if ld.shift == "next" else "-1"
        return NS(var=ld.sym, t="", **{**common, "gather_from": b},
                  edge_t=f"(_t0.to(tl.int64) + {edge})",
                  edge_col="BLOCK_T - 1" if ld.shift == "next" else "0", idx=f"_idx_{ld.shift}")
    return NS(var=ld.sym, t=TVAR[ld.shift], **{**common, "tile_call": ld.optional and not ld.index})


def _triton_context(plan: Plan, sy: _Symbols, options: Options) -> NS:
    """The Triton kernels' template context: :func:`~scangen.compiler.tiling.plan_triton`'s
    decisions, printed."""
    ir = plan.ir
    tp = plan_triton(plan, options)
    rev = ir.reverse
    # the chunk column's step, relative to the chunk
    tcol = "_tcol" if tp.grouped or tp.grouped_choice else "_pos"
    tile = sy.table(sy.triton_tile, [s for sp in plan.sums for s, _ in sp.block.assigns])
    pr = functools.partial(print_expr, TritonPrinter, symbols=tile, spec_name=ir.name)
    # Row offsets: one per tensor (inputs, params, outputs), from its first two strides.
    bases = [NS(var=f"{i.name}__row", s1=f"{i.name}__s1", s2=f"{i.name}__s2") for i in ir.inputs]
    bases += [NS(var=f"{p.name}__row", s1=f"{p.name}__s1", s2=f"{p.name}__s2")
              for p in ir.params]
    bases += [NS(var=f"{o.name}__orow", s1=f"{o.name}__os1", s2=f"{o.name}__os2")
              for o in ir.outputs]
    row_loads = [NS(var=r.src, ptr=f"{r.src}__ptr", base=f"{r.src}__row",
                    has=abi.has_flag(r.src) if r.optional else "", default=repr(r.default))
                 for r in tp.row_loads]
    loads = [_tile_load(ld) for ld in tp.loads]
    head = [a.name for a in tp.args if a.kind in ("ptr", "value")]
    # the template writes the sizes (R1, R2, T, K) and the tile constexprs out itself
    ints = [a.name for a in tp.args if a.kind == "int" and a.role != "size"]
    constexprs = [a.name for a in tp.args
                  if a.kind == "constexpr" and a.name not in abi.TILE_CONSTEXPRS]
    # position flags compare chunk columns: step t = _t0 + column (see the template's chunk_index)
    steps = {"": tcol, "next": f"{tcol} + 1", "prev": f"{tcol} - 1", "next2": f"{tcol} + 2",
             "prev2": f"{tcol} - 2"}
    conds = {f"{pos}{'__' + k if k else ''}": f"{v} == {edge}" for k, v in steps.items()
             for pos, edge in (("is_first", "0 - _t0"), ("is_last", "_rem - 1"))}
    positions = [NS(var=s, cond=conds[s]) for s in sorted(plan.symbols) if s in conds]
    gathers = [NS(var=g.var, ptr=f"{g.src}__ptr", base=f"{g.src}__row", t=TVAR[g.shift],
                  st=f"{g.src}__st", sk=f"{g.src}__sk", index=g.index) for g in plan.gathers]
    ktable = sy.table(sy.triton_k, [s for sp in plan.sums for s, _ in sp.block.assigns])
    sums = []
    for sp in plan.sums:
        kl = [NS(var=f"{s}__k", ptr=f"{sy.base(s)}__ptr", base=f"{sy.base(s)}__row",
                 t=TVAR[split_sym(s)[1]], st=f"{sy.base(s)}__st", sk=f"{sy.base(s)}__sk")
              for s in sp.k_symbols]
        kk = {**ktable, **{v: v for v, _ in sp.block.assigns}}
        sums.append(NS(var=sp.var, loads=kl, assigns=_assigns(sp.block, TritonPrinter, kk,
                                                               ir.name),
                       summand=print_expr(TritonPrinter, sp.block.results[0][1], kk, ir.name)))
    scans = {}
    for s in plan.scans:
        res = dict(s.block.results)
        scans[s.name] = NS(name=s.name, carry=f"{s.name}__carry",
                           init=print_expr(TritonPrinter, s.init, {}, ir.name),
                           assigns=_assigns(s.block, TritonPrinter, tile, ir.name),
                           alpha=pr(res["alpha"]), beta=pr(res["beta"]), shifted=s.shifted,
                           shift_var=f"{s.name}__{'next' if rev else 'prev'}")
    joints = {j.first: j for j in plan.joints}
    groups = []
    for g in tp.groups:
        if not g.joint:
            scans[g.scans[0]].lb_base = g.lb_base
            groups.append(NS(joint=False, scans=[scans[g.scans[0]]], lb_base=g.lb_base))
            continue
        j = joints[g.scans[0]]
        res = dict(j.block.results)
        groups.append(NS(joint=True, first=scans[g.scans[0]], second=scans[g.scans[1]],
                         assigns=_assigns(j.block, TritonPrinter, tile, ir.name),
                         lb_base=g.lb_base, **{w: pr(res[w]) for w in "pqruv"}))
    outputs = [NS(name=o, flag=abi.store_flag(o), ptr=f"{o}__optr", base=f"{o}__orow",
                  st=f"{o}__ost", code=pr(e)) for o, e in plan.outputs.results]
    # the persist family sets a row tile up twice an item: for the next item's loads (raw) and
    # for this item's reductions and stores (compute); each computes the row offsets it reads
    raw = {ld.base for ld in loads}
    compute = ({r.base for r in row_loads} | {o.base for o in outputs} | {g.base for g in gathers}
               | {ld.base for sp in sums for ld in sp.loads})
    for b in bases:
        b.raw, b.compute = b.var in raw, b.var in compute
    # ... and the shifted steps each reads (TVAR's names; split loads read _t_next or _t_prev)
    raw_t = {ld.t for ld in loads if getattr(ld, "t", "")}
    raw_t |= {TVAR["next" if sh.next else "prev"] for ld in loads
              for sh in getattr(ld, "shifts", ())}
    compute_t = {g.t for g in gathers} | {ld.t for sp in sums for ld in sp.loads}
    step_code = {"next": "tl.minimum(_t + 1, T - 1)", "prev": "tl.maximum(_t - 1, 0)",
                 "next2": "tl.minimum(_t + 2, T - 1)", "prev2": "tl.maximum(_t - 2, 0)"}
    steps = [NS(var=TVAR[sh], code=code, raw=TVAR[sh] in raw_t, compute=TVAR[sh] in compute_t)
             for sh, code in step_code.items() if sh in tp.shifts]
    return NS(kernel=f"_{ir.name}_chunked_kernel", steps=steps,
              lookback_kernel=f"_{ir.name}_lookback_kernel",
              n_scans=len(plan.scans), direction=ir.direction,
              # the signature, wrapped for the page: pointers and values, each tensor's strides
              # on a line of their own, the op's constexprs
              head_lines=_wrap(head, 4), head_ws_lines=_wrap(head + ["_ws"], 4),
              int_lines=[", ".join(g) + "," for g in _by_tensor(ints)],
              constexpr_lines=_wrap([f"{c}: tl.constexpr" for c in constexprs], 4),
              step_to_chunk="_n_chunks - 1 - _step" if rev else "_step",
              state_idx="_idx_next" if rev else "_idx_prev",
              bases=bases, row_loads=row_loads, loads=loads,
              positions=positions, gathers=gathers, sums=sums, scans=list(scans.values()),
              groups=groups, uses_joint=tp.joint, lb_words=tp.lb_words,
              out_assigns=_assigns(plan.outputs, TritonPrinter, tile, ir.name), outputs=outputs,
              uses_shifted_state=tp.shifted_state, shift_mode=options.shift,
              gather_next=tp.gather_next, gather_prev=tp.gather_prev,
              split_loads=tp.split_loads, persist=tp.persist,
              persist_kernel=f"_{ir.name}_persist_kernel",
              chunk_index="_n_chunks - 1 - _c" if rev else "_c", reverse=str(rev),
              step="+1" if rev else "-1", grouped=tp.grouped, tcol=tcol,
              grouped_choice=tp.grouped_choice,
              # runs of steps a warp (LANE_WARPS) reorder the columns: not with column gathers
              warp_runs=not (tp.gather_next or tp.gather_prev),
              carry_col=("BLOCK_T - SHIFT_G" if tp.grouped else "_carry_col" if tp.grouped_choice
                         else "0" if rev else "BLOCK_T - 1"),
              edge_col="BLOCK_T - 1" if rev else "0",
              k_dense=tp.k_dense, shift_g=tp.shift_g, helpers=shared_helpers(),
              lean=_lean_kernels(ir, tp))


def _lean_kernels(ir, tp) -> list[NS]:
    """Each family's lean entry kernel (scangen.abi.lean_args): its parameters, and the full
    kernel's arguments it passes on (scangen.abi.lean_binding), both wrapped for the page."""
    shapes = {i.name: i.shape for i in ir.inputs}
    families = [("stream", "chunked", False), ("lookback", "lookback", True)]
    if tp.persist:
        families.insert(1, ("persist", "persist", False))
    out = []
    for family, kind, ws in families:
        args = dict(inputs=ir.inputs, params=ir.params, outputs=[o.name for o in ir.outputs],
                    workspace=ws, k_dense=tp.k_dense, shift_g=tp.shift_g,
                    grouped=tp.grouped_choice)
        params = [f"{a.name}: tl.constexpr" if a.kind == "constexpr" else a.name
                  for a in abi.lean_args(**args)]
        call = [abi.lean_binding(a, shapes) for a in abi.kernel_args(**args)]
        out.append(NS(family=family, name=f"_{ir.name}_{kind}_lean",
                      body=f"_{ir.name}_{kind}_kernel", params=_wrap(params, 4),
                      call=_wrap(call, 8)))
    return out


def _by_tensor(names: list[str]) -> list[list[str]]:
    """Consecutive stride arguments grouped by the tensor they belong to (``x__s1``, ``x__s2``,
    ``x__st``: ``x``)."""
    groups: list[list[str]] = []
    for n in names:
        if groups and groups[-1][0].rsplit("__", 1)[0] == n.rsplit("__", 1)[0]:
            groups[-1].append(n)
        else:
            groups.append([n])
    return groups


def _wrap(items: list[str], indent: int, width: int = 100) -> list[str]:
    """``items`` joined by commas into lines of at most ``width`` characters."""
    lines, line = [], ""
    for it in items:
        piece = f"{it},"
        if line and indent + len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    return lines + [line] if line else lines


def _torch_context(plan: Plan, sy: _Symbols) -> NS:
    ir = plan.ir
    names = sorted(plan.symbols)
    table = {s: s for s in names}
    pr = functools.partial(print_expr, TorchPrinter, symbols=table, spec_name=ir.name)
    kinds = {i.name: i for i in ir.inputs}
    loads = []
    for i in ir.inputs:
        if i.optional and f"HAS_{i.name}" in plan.symbols:
            loads.append(f'HAS_{i.name} = 1.0 if _call.has("{i.name}") else 0.0')
    split = [(sym, *split_sym(sym)) for sym in names]
    for b in sorted({b for _, b, _ in split if b in kinds or b in sy.params}):
        src = (f'_tp.param(_call, "{b}")' if b in sy.params
               else f'_tp.load(_call, "{b}", {kinds[b].default!r})')
        loads.append(f"{b} = {src}")
    for sym, b, shift in split:
        if (b in kinds or b in sy.params) and shift:
            dim = ", dim=2" if b in kinds and kinds[b].shape == "NTK" else ""
            loads.append(f'{sym} = _tp.shift({b}, "{shift}"{dim})')
        elif b in ("is_first", "is_last"):
            loads.append(f'{sym} = _tp.position(_call, "{sym}")')
    for g in plan.gathers:
        src = f"{g.src}__{g.shift}" if g.shift else g.src
        loads.append(f"{g.var} = _tp.gather({src}, {g.index})")
    ktable = {s: sy.torch_k(s) for s in names}
    sums = []
    for sp in plan.sums:
        kk = {**ktable, **{v: v for v, _ in sp.block.assigns}}
        sums.append(NS(var=sp.var, assigns=_assigns(sp.block, TorchPrinter, kk, ir.name),
                       summand=print_expr(TorchPrinter, sp.block.results[0][1], kk, ir.name)))
    scans = []
    for s in plan.scans:
        res = dict(s.block.results)
        scans.append(NS(name=s.name, assigns=_assigns(s.block, TorchPrinter, table, ir.name),
                        alpha=pr(res["alpha"]), beta=pr(res["beta"]),
                        init=print_expr(TorchPrinter, s.init, table, ir.name), shifted=s.shifted,
                        shift_var=f"{s.name}__{'next' if ir.reverse else 'prev'}"))
    return NS(loads=loads, sums=sums, scans=scans, reverse=str(ir.reverse),
              shift="next" if ir.reverse else "prev",
              out_assigns=_assigns(plan.outputs, TorchPrinter, table, ir.name),
              outputs=[NS(name=o, code=pr(e)) for o, e in plan.outputs.results])


def _api_context(ir: IR) -> NS:
    optional = {i.name for i in ir.inputs if i.optional}
    params = {p.name: p for p in ir.params}
    parts, kw_only = [], False
    for a in ir.signature:
        if a == "*":
            kw_only = True
            parts.append("*")
        elif a in params:
            d = params[a].default
            parts.append(a if d is None and not params[a].choices else
                         f"{a}={None if isinstance(d, str) and not params[a].choices else d!r}")
        elif a in optional or kw_only:
            parts.append(f"{a}=None")
        else:
            parts.append(a)
    parts += ([] if kw_only else ["*"]) + ["time_dim=-1", "outputs=None", "backend=None"]
    return NS(name=repr(ir.name), function=ir.function, function_repr=repr(ir.function),
              direction=repr(ir.direction),
              inputs=[", ".join(map(repr, (i.name, i.kind, i.shape, i.default, i.doc)))
                      for i in ir.inputs],
              params=[", ".join(map(repr, (p.name, p.default, p.doc, p.choices)))
                      for p in ir.params],
              outputs=repr(tuple(o.name for o in ir.outputs)), returns=repr(ir.returns),
              exclusive=repr(ir.exclusive), signature=", ".join(parts),
              args=[a for a in ir.signature if a != "*"], docstring=pylit(_docstring(ir)))


def _docstring(ir: IR) -> str:
    shapes = {"NT": "[N, T]", "N": "[N]", "NTK": "[N, T, K]"}
    lines = (ir.doc.strip() or f"The '{ir.name}' scan.").splitlines() + ["", "Args:"]
    inputs, params = {i.name: i for i in ir.inputs}, {p.name: p for p in ir.params}
    # optional inputs the update tests with present(): left out, they are not their default
    # value but another rule (TD(lambda)'s bootstrap_values: next_values), which their doc says
    exprs = [e for s in ir.scans for e in (s.alpha, s.beta, s.init)] + [o.expr for o in ir.outputs]
    tested = {str(a.args[0]) for e in exprs for a in e.atoms(Present)}
    for a in ir.signature:  # in the function's own order
        if a in inputs:
            i = inputs[a]
            opt = ("" if not i.optional else ", optional" if i.name in tested
                   else f", optional (default {i.default:g})")
            lines.append(f"    {i.name}: {shapes[i.shape]} {i.kind}{opt}. {i.doc}".rstrip())
        elif a in params:
            p = params[a]
            d = "required" if p.default is None else f"default {p.default!r}"
            kind = "float or tensor broadcastable to [N, T]"
            if p.choices:  # a string that selects the update, not a number
                d += "; one of " + ", ".join(repr(k) for k, _ in p.choices)
                kind = "str"
            lines.append(f"    {p.name}: {kind} ({d}). {p.doc}".rstrip())
    lines += ["    time_dim: the time axis of the [N, T] inputs (-1: rows [N, T]; 0: time-major).",
              "    outputs: output name(s) to compute; default " + ", ".join(ir.returns) + ".",
              "    backend: 'auto' (Triton on CUDA, numba on CPU), 'triton', 'numba' or 'torch'.",
              "", "Returns:"]
    for o in ir.outputs:
        if not abi.is_state_output(o.name):  # the backward's saved states are not the user's
            lines.append(f"    {o.name}: [N, T] in the inputs' floating dtype. {o.doc}".rstrip())
    return "\n    ".join(line.rstrip() for line in lines)


def render(plan: Plan, source: str, options: Options | None = None) -> dict[str, str]:
    """The forward (or backward) op of ``plan`` as ``{suffix: module source}``: ``""`` the op
    module (the vectorised torch implementation, its :class:`~scangen.abi.OpInfo` and the public
    function), :data:`~scangen.abi.TRITON_SUFFIX` its Triton kernels, a companion module so that
    the op imports Triton only when it launches a kernel."""
    ir = plan.ir
    sy = _Symbols(ir, plan)
    title = (ir.doc.strip().splitlines() or [ir.name])[0]
    common = dict(version=__version__, source=comment(source), title=pylit(title),
                  function=ir.function, module=ir.name,
                  k=_triton_context(plan, sy, Options.of(options)))
    return {"": render_template(TEMPLATE, t=_torch_context(plan, sy), api=_api_context(ir),
                                **common),
            abi.TRITON_SUFFIX: _drop_unused_helpers(render_template(TRITON_TEMPLATE, **common))}


KERNEL_HELPERS = ("common", "lookback")  # the modules of scangen/kernels the kernels import


@functools.lru_cache(maxsize=1)
def shared_helpers() -> dict[str, tuple[str, ...]]:
    """The @triton.jit helpers of each module of scangen/kernels (KERNEL_HELPERS), read from its
    source (the modules import Triton, which the compiler does not need)."""
    out = {}
    for mod in KERNEL_HELPERS:
        text = (PACKAGE / "kernels" / f"{mod}.py").read_text(encoding="utf-8")
        out[mod] = tuple(sorted(re.findall(r"^@triton\.jit\ndef (\w+)\(", text, re.M)))
    return out


def _drop_unused_helpers(text: str) -> str:
    """The template imports every shared helper (:func:`shared_helpers`); the module keeps the
    imports of those its kernels call."""
    lines = text.split("\n")
    out = []
    for line in lines:
        m = re.fullmatch(r"    (\w+) as (_\w+),", line)
        if m and len(re.findall(rf"\b{m.group(2)}\b", text)) < 2:
            continue
        out.append(line)
    # a helpers' module none of whose helpers the kernels call: no import at all
    return re.sub(r"from scangen\.kernels\.\w+ import \(\n\)\n", "", "\n".join(out))
