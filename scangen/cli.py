"""The ``scangen`` command: build, list, show, check, verify and benchmark generated kernels."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from .errors import SpecError

DEFAULT_OUT = "generated"


def _cmd_build(args) -> int:
    from .compiler.store import build, builtin_spec_paths
    builtins = builtin_spec_paths()
    specs = [Path(p) for p in args.specs] or builtins
    package = _package_generated()
    out = Path(args.out) if args.out is not None else _default_out(package)
    own = [p for p in specs if p.resolve() not in {b.resolve() for b in builtins}]
    if own and args.out is None:  # --out given, even as generated/, is the user's choice
        print(f"error: pass --out DIR to build your own specs ({', '.join(map(str, own))}); "
              f"{DEFAULT_OUT}/ holds the built-ins, or use scangen.compile(path) at run time",
              file=sys.stderr)
        return 2
    if own and package is not None and out.resolve() == package:
        print(f"error: {out} is scangen's own generated package, which holds the built-ins (a build "
              f"there rewrites its __init__.py); build your specs into another folder "
              f"(--out DIR) or compile them at run time with scangen.compile(path)", file=sys.stderr)
        return 2
    changed = build(specs, out, check=args.check)
    if args.check:
        if changed:
            again = " ".join(["scangen build", *map(shlex.quote, args.specs),
                              *(["--out", shlex.quote(args.out)] if args.out is not None else [])])
            print(f"{out} is stale: {', '.join(changed)} differ from the specs and templates "
                  f"(or were generated from specs no longer built); "
                  f"run `{again}`", file=sys.stderr)
            return 1
        print(f"{out} is up to date ({len(specs)} spec{'s' if len(specs) != 1 else ''})")
        return 0
    removed = [c for c in changed if not (out / c).exists()]
    written = [c for c in changed if c not in removed]
    print(f"wrote {len(written)} file(s) to {out}: {', '.join(written) or 'nothing changed'}"
          + (f"; removed {len(removed)} no spec builds now: {', '.join(removed)}" if removed else ""))
    return 0


def _default_out(package) -> Path:
    """The built-ins' folder without --out: ``generated/`` of the current folder where it holds
    generated modules (the repository root), else the generated package scangen imports (a bare
    build elsewhere wrote every built-in into a new ``./generated``)."""
    here = Path(DEFAULT_OUT)
    if (here / "__init__.py").is_file() or package is None:
        return here
    try:
        return package.relative_to(Path.cwd().resolve())
    except ValueError:
        return package


def _package_generated():
    """The folder the installed scangen imports its generated modules from (None if missing)."""
    try:
        from . import generated  # scangen's own: generated/ in a checkout, scangen/generated in a wheel
        return Path(generated.__path__[0]).resolve()
    except ImportError:
        return None


def _builtins():
    from .compiler.pipeline import to_ir
    from .compiler.store import builtin_spec_paths
    return {p.stem: (p, to_ir(p)) for p in builtin_spec_paths()}


def _cmd_list(args) -> int:
    for name, (path, ir) in sorted(_builtins().items()):
        first = (ir.doc.strip().splitlines() or [""])[0]
        print(f"{ir.function:32s} {ir.direction:8s} {first}")
    return 0


def _cmd_show(args) -> int:
    table = _builtins()
    by_fn = {ir.function: (p, ir) for p, ir in table.values()}
    hit = table.get(args.name) or by_fn.get(args.name)
    if hit is None:
        print(f"unknown built-in {args.name!r}; `scangen list` shows them", file=sys.stderr)
        return 2
    path, ir = hit
    print(f"# spec: {path}\n# code: generated/{ir.name}.py (function {ir.function})")
    print(ir.text(), end="")
    return 0


def _cmd_check(args) -> int:
    from .compiler.ir import canonical
    from .compiler.pipeline import generate
    ir, _ = generate(Path(args.file))  # every stage, so check fails wherever build would
    print(f"{args.file}: ok ({ir.direction} scan, function {ir.function})")
    for s in ir.scans:
        print(f"  {s.name}: alpha = {canonical(s.alpha)}")
        print(f"  {' ' * len(s.name)}  beta  = {canonical(s.beta)}")
        print(f"  {' ' * len(s.name)}  init  = {canonical(s.init)}")
    return 0


def _cmd_verify(args) -> int:
    from .testing.verify import verify_all
    if args.device is not None:
        import torch
        try:
            device = torch.device(args.device)
        except RuntimeError:
            device = None
        if device is None or device.type not in ("cpu", "cuda"):
            print(f"error: --device must be cpu or cuda (cuda:N), got {args.device!r}", file=sys.stderr)
            return 2
        if device.type == "cuda" and not torch.cuda.is_available():
            print("error: --device cuda: torch sees no CUDA device here (--device cpu runs the "
                  "CPU backends)", file=sys.stderr)
            return 2
    return 0 if verify_all(device=args.device, sizes=args.sizes) else 1


def _cmd_bench(args) -> int:
    from .benchmark.suite import main as bench
    try:
        return bench(args)
    except (ValueError, RuntimeError, OSError) as exc:  # a bad option, no matplotlib, an unreadable CSV
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _add_bench(sub) -> None:
    b = sub.add_parser("bench", help="time the built-ins on this machine beside the loops users run",
                       description="Check each implementation against the float64 reference, then time "
                                   "it beside a copy of a buffer beyond the last-level cache (the floor).")
    b.add_argument("names", nargs="*", metavar="NAME",
                   help="built-ins (gae or compute_gae; default: gae vtrace masked_gae)")
    b.add_argument("--shapes", help="NxT[,NxT...] (default: 4096x128,1024x1024,1x1048576 on the CPU; "
                                    "4096x128,16384x1024,64x65536,1x1048576 on CUDA)")
    b.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if available")
    b.add_argument("--dtype", help="float32,bfloat16,float16,float64 (comma list; default float32)")
    b.add_argument("--layout", help="rows or time-major (comma list; default rows)")
    b.add_argument("--threads", type=int, help="CPU threads of every implementation (default: all cores)")
    b.add_argument("--baselines", help="comma list of scangen_torch, compiled_scan, torch_loop, numpy_loop "
                                       "(default: scangen_torch,torch_loop,numpy_loop on the CPU; "
                                       "scangen_torch,compiled_scan,torch_loop on CUDA)")
    b.add_argument("--rounds", type=int, help="samples per implementation (default 7 on the CPU, 5 on CUDA)")
    b.add_argument("--floor-mb", type=float, help="size of the copy that measures the bandwidth "
                                                  "(default: twice the last-level cache; on the CPU "
                                                  "256 MiB to 1 GiB, on CUDA at least 1 GiB)")
    b.add_argument("--quick", action="store_true", help="3 rounds, shorter samples, loops over <= 1024 steps")
    b.add_argument("--csv", metavar="FILE", help="write one row per implementation and configuration")
    b.add_argument("--plot", metavar="FILE.png", help='draw the chart (needs matplotlib: pip install -e ".[plot]" from the checkout)')
    b.add_argument("--from-csv", metavar="FILE", help="measure nothing: print and --plot a CSV of an earlier run")
    b.set_defaults(fn=_cmd_bench)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="scangen", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="generate kernels for specs (default: the built-ins)")
    b.add_argument("specs", nargs="*", help="spec files (default: every built-in spec)")
    b.add_argument("--out", help="output folder (default: generated, for the built-ins only)")
    b.add_argument("--check", action="store_true", help="exit 1 if the output folder is stale")
    b.set_defaults(fn=_cmd_build)
    sub.add_parser("list", help="list the built-in algorithms").set_defaults(fn=_cmd_list)
    s = sub.add_parser("show", help="print a built-in's canonical IR and where its code lives")
    s.add_argument("name")
    s.set_defaults(fn=_cmd_show)
    c = sub.add_parser("check", help="validate a spec file and print its alpha/beta")
    c.add_argument("file", help="a YAML spec file")
    c.set_defaults(fn=_cmd_check)
    v = sub.add_parser("verify", help="run every built-in against its float64 reference")
    v.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    v.add_argument("--sizes", default="small", choices=("small", "large"))
    v.set_defaults(fn=_cmd_verify)
    _add_bench(sub)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (`scangen list | head -1`): stop quietly
        # Python flushes stdout again at exit; point it at devnull so that does not raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
