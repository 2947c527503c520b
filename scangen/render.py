"""Stage 5: render a :class:`~scangen.plan.Plan` into Python source through the Jinja templates.

Every decision is made here and handed to the templates in one context object: which loads,
which temporaries, how each expression prints in each context, which way time runs. The
templates only lay the pieces out.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from types import SimpleNamespace as NS

import jinja2

from . import __version__
from .ir import IR
from .plan import Block, Plan, split_sym
from .printers import TorchPrinter, TritonPrinter, print_expr

TEMPLATE = "module.py.j2"
# How a scan reads its neighbouring state (next(A) / prev(A)): "scan" carries the exclusive map
# through the scan itself; "gather" shifts the state tile with tl.gather (kept for measurement).
# How a shifted input (next(x) / prev(x)) is read: "split" (the default) loads the aligned tile
# with vector loads and takes the shifted one from it in registers: each thread holds SHIFT_G
# consecutive steps (runtime.shift_group), shifted within the thread by tl.split / tl.join, plus
# one strided load per group for the step beyond it (GAE 16384x1024 on an H200: 141 -> 95 us).
# "load" reads x again at t +- 1, an unaligned load that compiles to scalar loads; "gather"
# shifts the aligned tile with tl.gather. Both are kept for measurement (bench/sweep.py
# --variants input_shift=load).
# Every module carries three kernels: "stream", "persist" (persistent stream programs that load
# the next item's tiles before scanning the current one) and "lookback"; scangen.config picks
# one per call. "persist" needs input_shift "split" or "load": with "gather" it is left out
# and the stream kernel runs in its place.
# How two chained scans run (plan.JointPlan: the second reads the first's state one step nearer
# the carry, as masked GAE's advantage reads the next valid value): "joint" (the default) scans
# both at once as one scan of 2x2 triangular affine maps (five words per step), and the look-back
# kernel runs one look-back over five-word aggregates for the pair; "sequential" scans the first
# (with its exclusive map), then the second. Masked GAE on the H200 (bench/NOTES.md, sixth
# round): joint 12% faster at 64x65536, 7% at 1x1048576, the same at 16384x1024 and below.
# The order of a reverse scan's steps within a chunk: "grouped" (the default: the groups of
# steps each thread holds in reverse order, reversed again in registers, and a forward scan, so
# the loads keep their vectors) or "natural" (column j holds step j; the scan runs
# tl.associative_scan(reverse=True), which reverses lanes with shuffles: 24 of the 46 shuffles
# of a bare two-word scan over 1024 steps on 4 warps). The scans run in natural order where
# grouped does not apply or lost: with shift="gather" or input_shift="gather" (the gathers index
# natural columns), and in specs with [N, T, K] inputs (Retrace: its tiles hold one step per
# thread, so the whole chunk is reversed, and the H200 measured grouped 19% slower at
# 16384x1024). H200, CUDA-graph device time, natural -> grouped (bench/NOTES.md, seventh round):
# GAE 16384x1024 86.8 -> 75.7 us, masked GAE 124.7 -> 77.2, discounted returns 69.0 -> 55.7.
OPTIONS = {"shift": "scan", "input_shift": "split", "chain": "joint", "scan_order": "grouped"}


def template_dir() -> Path:
    here = Path(__file__).resolve().parent
    for cand in (here / "templates", here.parent / "templates"):
        if (cand / TEMPLATE).is_file():
            return cand
    raise FileNotFoundError("scangen templates not found next to the package")


@functools.lru_cache(maxsize=None)
def _env(path: str) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(path),
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              autoescape=False)


def templates_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(template_dir().glob("*.j2")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _pylit(text: str) -> str:
    """Text safe inside a triple-quoted docstring: backslashes escaped, quotes escaped where they
    touch another quote or end the text (so no run of three and no merge with the closing
    quotes), and characters Python source cannot hold (NUL, lone surrogates) as escapes."""
    out = []
    for i, ch in enumerate(text):
        touching = text[i + 1:i + 2] in ('"', "") or text[i - 1:i] == '"'
        if ch == "\\" or (ch == '"' and touching):
            out.append("\\" + ch)
        elif ch == "\n" or (ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF):
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


def _comment(text: str) -> str:
    """Text safe on one comment line: printable ASCII only."""
    return "".join(ch if " " <= ch <= "~" else "?" for ch in str(text))


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


def _triton_context(plan: Plan, sy: _Symbols) -> NS:
    _check_options()
    ir = plan.ir
    rev = ir.reverse
    grouped = (rev and OPTIONS["scan_order"] == "grouped"
               and "gather" not in (OPTIONS["shift"], OPTIONS["input_shift"])
               and not any(i.shape == "NTK" for i in ir.inputs))
    tcol = "_tcol" if grouped else "_cols"  # the chunk column's step, relative to the chunk
    tile = sy.table(sy.triton_tile, [s for sp in plan.sums for s, _ in sp.block.assigns])
    pr = functools.partial(print_expr, TritonPrinter, symbols=tile, spec_name=ir.name)
    tvar = {"": "_t", "next": "_t_next", "prev": "_t_prev", "next2": "_t_next2",
            "prev2": "_t_prev2"}
    # Kernel arguments: pointers and per-call scalars first, then the integers (strides and
    # sizes), which are the same for every call of one launch plan and are built once per plan.
    ptr_args, int_args, constexprs, bases = [], [], [], []
    launch_ptrs, launch_ints, launch_cx = [], [], []
    for i in ir.inputs:
        ptr_args.append(f"{i.name}__ptr")
        int_args += [f"{i.name}__s1", f"{i.name}__s2", f"{i.name}__st"]
        int_args += [f"{i.name}__sk"] if i.shape == "NTK" else []
        size = 4 if i.shape == "NTK" else 3
        launch_ptrs.append(f'_t["{i.name}"]' if not i.optional else f'_t.get("{i.name}", _dummy)')
        launch_ints.append(f'*_st["{i.name}"]' if not i.optional
                           else f'*_st.get("{i.name}", {(0,) * size})')
        bases.append(NS(var=f"{i.name}__row", s1=f"{i.name}__s1", s2=f"{i.name}__s2"))
        if i.optional:
            constexprs.append(f"HAS_{i.name}")
            launch_cx.append(f'HAS_{i.name}="{i.name}" in _call.tensors')
    for p in ir.params:
        ptr_args += [p.name, f"{p.name}__ptr"]
        int_args += [f"{p.name}__s1", f"{p.name}__s2", f"{p.name}__st"]
        launch_ints.append(f'*_call.pstrides.get("{p.name}", (0, 0, 0))')
        bases.append(NS(var=f"{p.name}__row", s1=f"{p.name}__s1", s2=f"{p.name}__s2"))
        constexprs.append(f"{p.name}__TENSOR")
        launch_cx.append(f'{p.name}__TENSOR=_call.is_tensor("{p.name}")')
    if ir.params:  # (value, pointer) of every param, in order
        launch_ptrs.append("*_rt.param_ptrs(_call, _dummy)")
    for o in ir.outputs:
        ptr_args.append(f"{o.name}__optr")
        int_args += [f"{o.name}__os1", f"{o.name}__os2", f"{o.name}__ost"]
        launch_ptrs.append(f'_call.outs.get("{o.name}", _dummy)')
        launch_ints.append(f'*_call.out_strides.get("{o.name}", (0, 0, 0))')
        bases.append(NS(var=f"{o.name}__orow", s1=f"{o.name}__os1", s2=f"{o.name}__os2"))
        constexprs.append(f"STORE_{o.name}")
        launch_cx.append(f'STORE_{o.name}="{o.name}" in _call.outs')

    row_loads, loads, loaded, gather_shifts = [], [], set(), set()
    split_loads: dict[str, NS] = {}  # base input -> its one grouped load (input_shift="split")
    kinds = {i.name: i for i in ir.inputs}
    split_bases = {split_sym(s)[0] for s in plan.symbols
                   if OPTIONS["input_shift"] == "split" and split_sym(s)[1] in ("next", "prev")
                   and split_sym(s)[0] in kinds and kinds[split_sym(s)[0]].shape == "NT"}
    for sym in sorted(plan.symbols):
        b, shift = split_sym(sym)
        if b in kinds and kinds[b].shape == "N" and not shift:
            i = kinds[b]
            row_loads.append(NS(var=b, ptr=f"{b}__ptr", base=f"{b}__row",
                                has=f"HAS_{b}" if i.optional else "", default=repr(i.default)))
        elif b in kinds and kinds[b].shape == "NT" and shift in tvar:
            i = kinds[b]
            common = dict(ptr=f"{b}__ptr", base=f"{b}__row", st=f"{b}__st",
                          has=f"HAS_{b}" if i.optional else "", default=repr(i.default),
                          cast="" if i.kind == "index" else ".to(ACC)", gather_from="")
            if OPTIONS["input_shift"] == "split" and shift in ("next", "prev"):
                split_loads.setdefault(b, NS(var=b, shifts=[], **common))
                split_loads[b].shifts.append(NS(var=sym, next=shift == "next"))
                if not any(ld is split_loads[b] for ld in loads):
                    loads.append(split_loads[b])
                loaded.add(sym)
                continue
            if OPTIONS["input_shift"] == "gather" and shift in ("next", "prev"):
                if b not in loaded:  # the aligned tile the shifted one is taken from
                    loads.append(NS(var=b, t="_t", **common))
                    loaded.add(b)
                edge = "BLOCK_T" if shift == "next" else "-1"
                loads.append(NS(var=sym, t="", **{**common, "gather_from": b},
                                edge_t=f"(_t0.to(tl.int64) + {edge})",
                                edge_col="BLOCK_T - 1" if shift == "next" else "0",
                                idx=f"_idx_{shift}"))
                gather_shifts.add(shift)
            elif b in split_bases and not shift:
                pass  # the aligned tile comes from the grouped load
            elif sym not in loaded:
                loads.append(NS(var=sym, t=tvar[shift], **common))
            loaded.add(sym)
        elif b in sy.params and shift in tvar:
            loads.append(NS(var=f"{sym}__t", ptr=f"{b}__ptr", base=f"{b}__row", t=tvar[shift],
                            st=f"{b}__st", has=f"{b}__TENSOR", default=b, cast=".to(ACC)",
                            gather_from=""))
    constexprs.append("EVEN")
    launch_cx.append("EVEN=_rt.even(_call, _cfg)")
    if plan.sums:
        constexprs.append("K_DENSE")
        launch_cx.append("K_DENSE=_rt.k_dense(_call, _cfg)")
    if split_loads or grouped:
        constexprs.append("SHIFT_G")
        launch_cx.append("SHIFT_G=_rt.shift_group(_call, _cfg)")
    # position flags compare chunk columns: step t = _t0 + column (see the template's chunk_index)
    steps = {"": tcol, "next": f"{tcol} + 1", "prev": f"{tcol} - 1", "next2": f"{tcol} + 2",
             "prev2": f"{tcol} - 2"}
    conds = {f"{pos}{'__' + k if k else ''}": f"{v} == {edge}" for k, v in steps.items()
             for pos, edge in (("is_first", "0 - _t0"), ("is_last", "_rem - 1"))}
    positions = [NS(var=s, cond=conds[s]) for s in sorted(plan.symbols) if s in conds]
    gathers = [NS(var=g.var, ptr=f"{g.src}__ptr", base=f"{g.src}__row", t=tvar[g.shift],
                  st=f"{g.src}__st", sk=f"{g.src}__sk", index=g.index) for g in plan.gathers]
    ktable = sy.table(sy.triton_k, [s for sp in plan.sums for s, _ in sp.block.assigns])
    sums = []
    for sp in plan.sums:
        kl = [NS(var=f"{s}__k", ptr=f"{sy.base(s)}__ptr", base=f"{sy.base(s)}__row",
                 t=tvar[split_sym(s)[1]], st=f"{sy.base(s)}__st", sk=f"{sy.base(s)}__sk")
              for s in sp.k_symbols]
        kk = {**ktable, **{v: v for v, _ in sp.block.assigns}}
        sums.append(NS(var=sp.var, loads=kl, assigns=_assigns(sp.block, TritonPrinter, kk,
                                                               ir.name),
                       summand=print_expr(TritonPrinter, sp.block.results[0][1], kk, ir.name)))
    scans = []
    for s in plan.scans:
        res = dict(s.block.results)
        scans.append(NS(name=s.name, carry=f"{s.name}__carry",
                        init=print_expr(TritonPrinter, s.init, {}, ir.name),
                        assigns=_assigns(s.block, TritonPrinter, tile, ir.name),
                        alpha=pr(res["alpha"]), beta=pr(res["beta"]), shifted=s.shifted,
                        shift_var=f"{s.name}__{'next' if rev else 'prev'}"))
    # Scans in order, each alone or (chain="joint") as the pair of a JointPlan.
    by_name = {s.name: s for s in scans}
    joints = {j.first: j for j in plan.joints} if OPTIONS["chain"] == "joint" else {}
    groups, skip = [], set()
    for s in scans:
        if s.name in skip:
            continue
        j = joints.get(s.name)
        if j is None:
            groups.append(NS(joint=False, scans=[s]))
            continue
        res = dict(j.block.results)
        groups.append(NS(joint=True, first=s, second=by_name[j.second],
                         assigns=_assigns(j.block, TritonPrinter, tile, ir.name),
                         **{w: pr(res[w]) for w in "pqruv"}))
        skip.add(j.second)
    # The look-back workspace: three word arrays per scan (aggregate a, b; inclusive state),
    # seven per joint pair (the five-word map; both states).
    words = 0
    for grp in groups:
        grp.lb_base = words
        if grp.joint:
            words += 7
        else:
            grp.scans[0].lb_base = words
            words += 3
    outputs = [NS(name=o, flag=f"STORE_{o}", ptr=f"{o}__optr", base=f"{o}__orow", st=f"{o}__ost",
                  code=pr(e)) for o, e in plan.outputs.results]
    if OPTIONS["shift"] == "gather" and any(s.shifted for s in plan.scans):
        gather_shifts.add("next" if rev else "prev")  # the state's neighbour, by tl.gather
    states = {s.name for s in ir.scans}
    shifts = {split_sym(s)[1] for s in plan.symbols if split_sym(s)[0] not in states}
    shifts |= {g.shift for g in plan.gathers}
    shifts |= {split_sym(s)[1] for sp in plan.sums for s in sp.k_symbols}
    return NS(kernel=f"_{ir.name}_chunked_kernel", uses_t_next="next" in shifts,
              uses_t_prev="prev" in shifts, uses_t_next2="next2" in shifts,
              uses_t_prev2="prev2" in shifts, lookback_kernel=f"_{ir.name}_lookback_kernel",
              n_scans=len(plan.scans), direction=ir.direction, ptr_args=ptr_args,
              int_args=int_args,
              step_to_chunk="_n_chunks - 1 - _step" if rev else "_step",
              state_idx="_idx_next" if rev else "_idx_prev",
              constexprs=constexprs, bases=bases, row_loads=row_loads, loads=loads,
              positions=positions, gathers=gathers, sums=sums, scans=scans, groups=groups,
              uses_joint=any(g.joint for g in groups), lb_words=words,
              out_assigns=_assigns(plan.outputs, TritonPrinter, tile, ir.name), outputs=outputs,
              uses_shifted_state=any(s.shifted for g in groups if not g.joint for s in g.scans),
              shift_mode=OPTIONS["shift"],
              gather_next="next" in gather_shifts, gather_prev="prev" in gather_shifts,
              split_loads=bool(split_loads), persist=OPTIONS["input_shift"] != "gather",
              persist_kernel=f"_{ir.name}_persist_kernel",
              chunk_index="_n_chunks - 1 - _c" if rev else "_c", reverse=str(rev),
              step="+1" if rev else "-1", grouped=grouped, tcol=tcol,
              carry_col="BLOCK_T - SHIFT_G" if grouped else "0" if rev else "BLOCK_T - 1",
              edge_col="BLOCK_T - 1" if rev else "0",
              launch_ptrs=launch_ptrs, launch_ints=launch_ints, launch_constexprs=launch_cx)


_CHOICES = {"shift": ("scan", "gather"), "input_shift": ("split", "load", "gather"),
            "chain": ("sequential", "joint"), "scan_order": ("natural", "grouped")}


def _check_options() -> None:
    """Every template option has a known value (a misspelt one would silently render the
    default)."""
    for key, value in OPTIONS.items():
        if key not in _CHOICES or value not in _CHOICES[key]:
            raise ValueError(f"render.OPTIONS[{key!r}] = {value!r}: expected one of "
                             f"{', '.join(_CHOICES.get(key, ()))}" if key in _CHOICES else
                             f"render.OPTIONS has no option {key!r} (options: "
                             f"{', '.join(_CHOICES)})")


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
              args=[a for a in ir.signature if a != "*"], docstring=_pylit(_docstring(ir)))


def _docstring(ir: IR) -> str:
    shapes = {"NT": "[N, T]", "N": "[N]", "NTK": "[N, T, K]"}
    lines = (ir.doc.strip() or f"The '{ir.name}' scan.").splitlines() + ["", "Args:"]
    for i in ir.inputs:
        opt = f", optional (default {i.default:g})" if i.optional else ""
        lines.append(f"    {i.name}: {shapes[i.shape]} {i.kind}{opt}. {i.doc}".rstrip())
    for p in ir.params:
        d = "required" if p.default is None else f"default {p.default!r}"
        if p.choices:
            d += "; one of " + ", ".join(repr(k) for k, _ in p.choices)
        lines.append(f"    {p.name}: float or tensor broadcastable to [N, T] ({d}). {p.doc}"
                     .rstrip())
    lines += ["    time_dim: the time axis of the [N, T] inputs (-1: rows [N, T]; 0: time-major).",
              "    outputs: output name(s) to compute; default " + ", ".join(ir.returns) + ".",
              "    backend: 'auto' (Triton on CUDA, numba on CPU), 'triton', 'numba' or 'torch'.",
              "", "Returns:"]
    for o in ir.outputs:
        lines.append(f"    {o.name}: [N, T] in the inputs' floating dtype. {o.doc}".rstrip())
    return "\n    ".join(line.rstrip() for line in lines)


def render(plan: Plan, source: str) -> str:
    ir = plan.ir
    sy = _Symbols(ir, plan)
    title = (ir.doc.strip().splitlines() or [ir.name])[0]
    ctx = dict(version=__version__, source=_comment(source), title=_pylit(title),
               function=ir.function,
               k=_triton_context(plan, sy), t=_torch_context(plan, sy), api=_api_context(ir))
    return _env(str(template_dir())).get_template(TEMPLATE).render(**ctx)
