#!/usr/bin/env python3
"""Where a look-back program's time goes: the look-back kernel of generated modules timed with
parts of its look-back left out (H200.md's method: time variants, take differences).

    python3 bench/dev/probe_lookback.py [--algos gae,discounted_returns] [--shapes ...]
    python3 bench/dev/probe_lookback.py --layout time-major --tiles 32x128x4 --shapes 64x65536

Variants of each module's look-back (string edits of generated/<algo>_triton.py, the module's
kernels, loaded beside it; the look-back itself is scangen.kernels.lookback's, which a variant copies):
  default  as generated (the window and wait runtime.launch_params.lookback_window and lookback_spin pick)
  @<name>  another build of the module, from ab_base/<algo>_<name>.py and its kernels'
           ab_base/<algo>_<name>_triton.py at the checkout's root (an A/B against an earlier
           commit's modules: git show <rev>:generated/<algo>.py and <algo>_triton.py; ab_base/
           is git-ignored); a variant named twice is timed twice
  w<n>     a window of n predecessors instead
  spin     with the one-word wait for the nearest predecessor's aggregate before the first
           window (LB_SPIN on); nospin without it; w<n>-spin, w<n>-nospin both
  nowait   publishes its aggregate and inclusive state but reads nothing: carry = the scan's
           initial value (results wrong past the first chunk: not checked; a lower bound; a
           copy of the look-back helper without its wait and loop)
Modifiers joined to a variant with "+" (e.g. nowait+pid+noclear; results checked for pid,
ticket and keptws alone):
  pid      the program's chunk from its id (LB_PID on); ticket: from the counter (LB_PID off)
  noclear  no reset of the other half's words
  nostore  the outputs are not stored (the compiler then drops their arithmetic)
  keptws   under CUDA-graph capture, the workspace made (and filled) by the variant's first,
           eager call instead of a fresh one filled inside the graph (what the fill kernel in
           the graph costs; the kernel is unchanged). Since 51863b9 captured calls take a spare
           filled outside the graph themselves (runtime.workspace._captured_workspace): the two
           match
(The first probe of the tenth round, results/h200-2026-11-30-j-probe.txt, used modifiers written
for the kernels before LB_PID; see git history.)
Each is timed by CUDA-graph replay (device time), for each look-back tile, in one process.
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]  # the checkout, for scangen

import torch  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

from scangen import abi  # noqa: E402
from scangen.kernels import lookback as lb  # noqa: E402
from scangen.runtime import config, fastpath, workspace  # noqa: E402
from scangen.runtime import tiles as sg_tiles  # noqa: E402
from scangen.runtime import PLANS  # noqa: E402
from scangen.runtime.config import Config  # noqa: E402
from scangen.testing import as_time_major, assert_close, make_inputs  # noqa: E402

# the look-back helper's wait and loop (scangen.kernels.lookback.lookback, lookback_joint and their
# row-tile forms lookback_rows, lookback_joint_rows)
WAIT = re.compile(r"\n    if SPIN:\n.*?(?=\n    (?:carry|c2) = )", re.S)
# the ticket's reset of the other half's words (lookback_ticket, without LB_PID)
TICKET_RESET = "    if not PID:\n        lookback_reset(ws_clear, n_words, WORDS, BN)\n"
LB_CALL = re.compile(r"\blookback(_rows|_joint|_joint_rows)?\(")
OUT_STORE = re.compile(r"^(\s+)tl\.store\(\w+__optr [^\n]*$", re.M)


def modify(src: str, name: str, mods: list) -> str:
    """The look-back kernel of ``src`` with the modifiers of the module docstring applied."""
    head, sep, kernel = src.partition("_lookback_kernel(")
    body, sep2, rest = kernel.partition("\ndef _torch_impl(")
    for m in mods:
        if m in ("pid", "ticket"):  # the ticket's order and where the reset sits
            body, n = re.subn(r"\bif LB_PID:|, LB_PID, ACC\)",
                              lambda g: g.group(0).replace("LB_PID", str(m == "pid")), body)
            assert n == 2, (m, n)  # the ticket's call and the reset after the stores
        elif m == "noclear":  # the reset after the stores, and the ticket's copy without its own
            body, n = re.subn(r"_lookback_reset\([^)]*\)", "pass", body)
            body = body.replace("_lookback_ticket(", "lookback_ticket_noclear(")
        elif m == "nostore":
            body, n = OUT_STORE.subn(r"\1pass", body)
        elif m == "keptws":  # applied when timing (kept_workspace)
            n = 1
        else:
            raise SystemExit(f"unknown modifier {m!r}")
        assert n >= 1, (m, n)
    src = head + sep + body + sep2 + rest
    if "noclear" in mods:
        code = inspect.getsource(lb.lookback_ticket.fn)
        assert TICKET_RESET in code
        code = code.replace(TICKET_RESET, "").replace("def lookback_ticket(",
                                                      "def lookback_ticket_noclear(")
        src = _with_helpers(src, [code])
    return src


def _with_helpers(src: str, helpers: list) -> str:
    """``src`` (a generated ``_triton`` module) with the helpers' source after its imports."""
    head, sep, rest = src.partition("\n\n\n@triton.jit")
    return (head + "\nfrom scangen.kernels.lookback import lb_word  # noqa: E402\n\n\n"
            + "\n\n".join(helpers) + sep + rest)


def variant(algo: str, name: str, tmp: Path):
    """The public function of ``algo``'s module with the variant ``name`` applied to its Triton
    companion (``<algo>_triton.py``, which holds the kernels), both written to ``tmp`` and loaded
    as a pair (scangen.abi.load_module: the op finds its companion beside its module's file)."""
    name, *mods = name.split("+")
    if name.startswith("@"):  # another build: <root>/ab_base/<algo>_<name>.py and _triton.py
        base = ROOT / "ab_base" / f"{algo}_{name[1:]}"
        name = "default"
    else:
        base = ROOT / "generated" / algo
    src = base.with_name(base.name + ".py").read_text()
    ksrc = modify(base.with_name(base.name + abi.TRITON_SUFFIX + ".py").read_text(), name, mods)
    if name.startswith("w"):
        ksrc, n = re.subn(r"LB_WINDOW, LB_SPIN", f"{int(name[1:].split('-')[0])}, LB_SPIN", ksrc)
        assert n >= 1, n
    if name.endswith("spin"):  # spin / nospin: force the first wait on or off
        ksrc, n = re.subn(r"LB_SPIN, ACC\)", f"{not name.endswith('nospin')}, ACC)", ksrc)
        assert n >= 1, n
    elif name == "nowait":
        ksrc = without_wait(ksrc)
    stem = re.sub(r"[^A-Za-z0-9_]", "_", "_".join([algo, name, *mods, str(len(ksrc))]))
    (tmp / f"{stem}{abi.TRITON_SUFFIX}.py").write_text(ksrc)
    (tmp / f"{stem}.py").write_text(src)
    module = abi.load_module(f"probe_{stem}", tmp / f"{stem}.py")
    return getattr(module, module.OP.function)


def without_wait(src: str) -> str:
    """``src`` with its look-back calls going to copies of scangen.kernels.lookback's helpers
    that publish their words but neither wait nor read (the carry is the initial value)."""
    helpers = []
    for name in ("lookback", "lookback_joint", "lookback_rows", "lookback_joint_rows"):
        code, n = WAIT.subn("", inspect.getsource(getattr(lb, name).fn))
        assert n == 1, (name, n)
        helpers.append(code.replace(f"def {name}(", f"def {name}_nowait("))
    calls = 0
    for name in ("lookback_tile", "lookback_joint_tile"):  # what the kernels call
        if f"_{name}(" not in src:
            continue
        code = LB_CALL.sub(lambda g: g.group(0)[:-1] + "_nowait(",
                           inspect.getsource(getattr(lb, name).fn))
        helpers.append(code.replace(f"def {name}(", f"def {name}_nowait("))
        src = src.replace(f"_{name}(", f"{name}_nowait(")
        calls += 1
    assert calls, "no look-back call in the module"
    return _with_helpers(src, helpers)


def kept_workspace():
    """A stand-in for runtime.workspace.lookback_workspace that hands every call of a plan,
    captured or not, the workspace its first call made (the modifier keptws)."""
    kept = {}

    def keep(c, cfg, n_words):
        ws = kept.get(id(c.lp))
        if ws is None:
            ws = kept[id(c.lp)] = workspace._new_workspace(c, cfg, n_words)
            c.lp.lb_words = n_words
        return ws
    return keep


def use_workspace(fn):
    """Every look-back call takes its workspace from ``fn`` (the general path's and the fast
    path's, which binds it when it is built)."""
    workspace.lookback_workspace = fastpath.lookback_workspace = fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="gae,discounted_returns,vtrace")
    ap.add_argument("--shapes", default="64x65536,8x262144,1x1048576")
    ap.add_argument("--tiles", default="2048x4,4096x4,8192x8",
                    help="block_t x num_warps, or with --layout time-major block_n x block_t x num_warps")
    ap.add_argument("--layout", default="rows", choices=["rows", "time-major"],
                    help="time-major: [T, N] buffers, the look-back over tiles of adjacent rows")
    ap.add_argument("--variants", default="default,spin,nowait")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for algo in args.algos.split(","):
        made = {}
        fns = [(v, made.get(v) or made.setdefault(v, variant(algo, v, tmp)))
               for v in args.variants.split(",")]
        for shape in args.shapes.split(","):
            N, T = map(int, shape.split("x"))
            kw = make_inputs(algo, N, T, seed=1, device="cuda", A=8)
            if args.layout == "time-major":
                kw = as_time_major(kw)
            ref = fns[0][1](**{k: v.double() if torch.is_tensor(v) and v.is_floating_point()
                                    else v for k, v in kw.items()}, backend="torch")
            ref = ref if isinstance(ref, tuple) else (ref,)
            for tile in args.tiles.split(","):
                bn, bt, nw = map(int, ("1x" + tile if tile.count("x") == 1 else tile).split("x"))
                if T < 2 * bt:
                    continue
                rule = lambda c, bn=bn, bt=bt, nw=nw: Config(  # noqa: E731
                    bn, bt, min(16, sg_tiles.pow2(c.K)) if c.K > 1 else 1, nw, "lookback", 1)
                line = []
                with config.override(rule):
                    for v, fn in fns:
                        PLANS.clear()
                        real_ws = workspace.lookback_workspace
                        if "keptws" in v.split("+"):  # before the first call: the fast path keeps it
                            use_workspace(kept_workspace())
                        try:
                            out = fn(**kw, backend="triton")
                            out = out if isinstance(out, tuple) else (out,)
                            base, *mods = v.split("+")
                            if base != "nowait" and not set(mods) - {"pid", "ticket", "keptws"}:
                                for o, e in zip(out, ref):
                                    assert_close(o, e, dtype=o.dtype)
                            us = 1e3 * do_bench_cudagraph(lambda: fn(**kw, backend="triton"), rep=30,
                                                          return_mode="median")
                        finally:
                            use_workspace(real_ws)
                        line.append(f"{v} {us:6.1f}")
                print(f"{algo:20s} {shape:>10s} bn={bn:3d} bt={bt:5d} w={nw}  " + "  ".join(line),
                      flush=True)


if __name__ == "__main__":
    main()
