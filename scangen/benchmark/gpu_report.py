"""The output of the developer GPU benchmark, ``bench/bench.py``: the derived numbers of each
configuration (% of the bandwidth floor, multiples of the launch floor, speed-ups), bench.json
(everything raw), bench.md (one table per dtype, PERF.md's targets), bench.csv (the tables'
rows, one per configuration) and the compact summary printed last. bench/README.md has the
columns.
"""
from __future__ import annotations

import json
import math

import torch

from . import meta as meta_io
from .gpu_tasks import DTYPE_NAME

# PERF.md's shape classes
PRODUCTION = {(4096, 128), (128, 1024), (32768, 16), (16384, 64)}
FEW_ROWS_LONG_T = {(64, 65536), (8, 262144), (1, 1048576)}
LARGE_ELEMS = 16 * 2 ** 20


def derive(rec, floors):
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    d = {}
    L, Lc = floors.get("launch_us"), floors.get("launch_call_us")
    if s.get("us") and rec.get("floor_us"):
        d["pct_floor"] = 100.0 * rec["floor_us"] / s["us"]
    if s.get("call_us") and rec.get("floor_us"):
        d["pct_floor_call"] = 100.0 * rec["floor_us"] / s["call_us"]
    if s.get("us") and L:
        d["x_launch"] = s["us"] / L
    Lc = s.get("floor_call_us") or Lc  # the floor timed beside this call, where measured
    if s.get("call_us") and Lc:
        d["x_launch_call"] = s["call_us"] / Lc
    s_us = c.get("scangen_us") or s.get("us")  # scangen re-timed beside the compiled baseline
    s_call = c.get("scangen_call_us") or s.get("call_us")
    if s_us and c.get("us"):
        d["vs_compile"] = c["us"] / s_us
    if s_call and c.get("call_us"):
        d["vs_compile_call"] = c["call_us"] / s_call
    if s.get("call_us") and lp.get("us"):
        d["vs_loop"] = lp["us"] / s["call_us"]
    if s.get("call_us") and lp.get("estimate_us"):
        d["vs_loop_est"] = lp["estimate_us"] / s["call_us"]
    rec["derived"] = d
    return d


def f_us(x):
    if x is None:
        return ""
    if x < 10:
        return f"{x:.2f}"
    if x < 100:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def f_x(x):
    if x is None:
        return ""
    if x < 10:
        return f"{x:.2f}x"
    if x < 100:
        return f"{x:.1f}x"
    return f"{x:,.0f}x"


def f_pct(x):
    return "" if x is None else f"{x:.0f}%"


def cell(text):
    return str(text).replace("|", "/").replace("\n", " ")


def short_name(algo):
    return algo[len("compute_"):] if algo.startswith("compute_") else algo


def part_cell(part, value_fmt, key="us"):
    if part.get("error"):
        return "ERR"
    if part.get(key) is not None:
        return value_fmt(part[key])
    if part.get("skipped"):
        return "skipped"
    return ""


def check_str(c):
    if not c:
        return ""
    if c.get("ok"):
        return "ok"
    parts = []
    for k, lab in (("ref", "ref"), ("oracle", "f64")):
        if k in c and c[k] > 1.0:
            parts.append(f"{lab} {c[k]:.3g}x tol")
    if "ref_error" in c:
        parts.append("ref n/a")
    return "FAIL " + ", ".join(parts) if parts else "unchecked"


def check_cell(rec):
    if rec.get("skipped"):
        return f"not run ({rec['skipped']})"
    bits = []
    for name in ("scangen", "compile", "loop"):
        part = rec.get(name, {})
        if part.get("error"):
            bits.append(f"{name}: {part['error']}")
        elif part.get("check") and not part["check"].get("ok"):
            bits.append(f"{name}: {check_str(part['check'])}")
    if rec.get("oracle_vs_ref") is not None and rec["oracle_vs_ref"] > 1.0:
        bits.append(f"float64 oracle vs reference {rec['oracle_vs_ref']:.3g}x tol (scangen/benchmark/baselines.py bug?)")
    if not bits:
        checked = [n for n in ("scangen", "compile", "loop") if rec.get(n, {}).get("check", {}).get("ok")]
        return "ok" if checked else ""
    return cell("; ".join(bits))[:220]


TABLE_HEAD = ("| algo | N x T | trunc | MB | floor us | scangen us | % BW floor | x launch | call us | call x launch "
              "| torch.compile us | speedup | loop us | speedup | check |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def table_row(rec):
    d = rec.get("derived", {})
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    mb = f"{rec['bytes'] / 1e6:.1f}" if rec.get("bytes") else ""
    if lp.get("us") is not None:
        loop_us, loop_x = f_us(lp["us"]), f_x(d.get("vs_loop"))
    elif lp.get("error"):
        loop_us, loop_x = "ERR", ""
    elif lp.get("estimate_us") is not None:
        loop_us = f"skipped (~{f_us(lp['estimate_us'])})"
        loop_x = f"~{f_x(d.get('vs_loop_est'))}" if d.get("vs_loop_est") else ""
    else:
        loop_us, loop_x = ("skipped" if lp.get("skipped") else ""), ""
    comp = part_cell(c, f_us)
    if c.get("skipped") and c.get("us") is None:
        comp = "skipped"
    cols = [short_name(rec["algo"]), f"{rec['N']}x{rec['T']}", rec["trunc"], mb, f_us(rec.get("floor_us")),
            part_cell(s, f_us), f_pct(d.get("pct_floor")), f_x(d.get("x_launch")), part_cell(s, f_us, "call_us"),
            f_x(d.get("x_launch_call")), comp, f_x(d.get("vs_compile")), loop_us, loop_x, check_cell(rec)]
    return "| " + " | ".join(cell(x) for x in cols) + " |"


def targets(records, floors, dtype="fp32"):
    """PERF.md's targets evaluated on this run's measurements (one line each)."""
    recs = [r for r in records if r["dtype"] == dtype and r.get("derived")]
    lines = []

    def line(title, rows, ok, value, fmt):
        rows = [r for r in rows if value(r) is not None]
        if not rows:
            return
        bad = [r for r in rows if not ok(value(r))]
        worst = sorted(bad, key=lambda r: value(r), reverse=fmt == "x_hi")[:4]
        w = ", ".join(f"{short_name(r['algo'])} {r['N']}x{r['T']}{'' if r['trunc'] != 'no' else ' notrunc'}="
                      + (f"{value(r):.0f}%" if fmt == "pct" else f"{value(r):.2f}x") for r in worst)
        lines.append(f"- {title}: {len(rows) - len(bad)}/{len(rows)} pass" + (f"; worst: {w}" if bad else ""))

    big = [r for r in recs if r["N"] * r["T"] >= LARGE_ELEMS]
    line(">= 85% of BW floor at >= 16M elements", big, lambda v: v >= 85, lambda r: r["derived"].get("pct_floor"), "pct")
    few = [r for r in recs if (r["N"], r["T"]) in FEW_ROWS_LONG_T]
    line(">= 60% of BW floor, few rows / long T", few, lambda v: v >= 60, lambda r: r["derived"].get("pct_floor"), "pct")

    def graph_pct(r):  # --graph: the device time without the host
        g = r.get("scangen", {}).get("graph_us")
        return 100 * r["floor_us"] / g if g and r.get("floor_us") else None
    line(">= 85% of BW floor at >= 16M elements (CUDA graph)", big, lambda v: v >= 85, graph_pct, "pct")
    line(">= 60% of BW floor, few rows / long T (CUDA graph)", few, lambda v: v >= 60, graph_pct, "pct")
    prod = [r for r in recs if (r["N"], r["T"]) in PRODUCTION]
    line("<= 2x launch floor at production shapes (host-timed full call)", prod, lambda v: v <= 2,
         lambda r: r["derived"].get("x_launch_call"), "x_hi")
    line("<= 2x launch floor at production shapes (do_bench, device-timed)", prod, lambda v: v <= 2,
         lambda r: r["derived"].get("x_launch"), "x_hi")
    line("faster than torch.compile (do_bench)", recs, lambda v: v > 1,
         lambda r: r["derived"].get("vs_compile"), "x_lo")
    at = [r for r in recs if (r["N"], r["T"]) == (4096, 128)]
    line(">= 5x torch.compile at 4096x128 (do_bench)", at, lambda v: v >= 5,
         lambda r: r["derived"].get("vs_compile"), "x_lo")
    line(">= 5x torch.compile at 4096x128 (host-timed)", at, lambda v: v >= 5,
         lambda r: r["derived"].get("vs_compile_call"), "x_lo")
    return lines


def dtype_ratio_line(records):
    by = {}
    for r in records:
        us = r.get("scangen", {}).get("us")
        if us:
            by[(r["algo"], r["N"], r["T"], r["trunc"], r["dtype"])] = (us, r.get("bytes"))
    out = []
    for dt in ("bf16", "fp16"):
        t_r, b_r = [], []
        for (a, n, t, tr, d), (us, b) in by.items():
            if d == dt and (a, n, t, tr, "fp32") in by:
                us32, b32 = by[(a, n, t, tr, "fp32")]
                t_r.append(us / us32)
                if b and b32:
                    b_r.append(b / b32)
        if t_r:
            gm = math.exp(sum(map(math.log, t_r)) / len(t_r))
            bm = math.exp(sum(map(math.log, b_r)) / len(b_r)) if b_r else float("nan")
            out.append(f"- {dt}/fp32 scangen time ratio: geomean {gm:.2f} over {len(t_r)} configs "
                       f"(bytes ratio geomean {bm:.2f}; PERF.md: time should scale with bytes)")
    return out


def floors_line(floors):
    bw, L, Lc = floors.get("copy_bw_GBps"), floors.get("launch_us"), floors.get("launch_call_us")
    a = f"copy bandwidth {bw:,.0f} GB/s" if bw else f"copy bandwidth n/a ({floors.get('copy_error')})"
    b = (f"launch floor {L:.2f} us (do_bench) / {Lc:.2f} us (host-timed loop)" if L and Lc
         else f"launch floor n/a ({floors.get('launch_error')})")
    if floors.get("launch_noarg_us") and floors.get("launch_noarg_call_us"):
        b += (f" [bare no-arg kernel: {floors['launch_noarg_us']:.2f} / "
              f"{floors['launch_noarg_call_us']:.2f} us]")
    if L and Lc:
        # The device's host has a slow mode that inflates every host-bound number of a
        # process (bench/NOTES.md, fourth round, item 6): say which one this process ran in.
        b += (f"; host/device launch ratio {Lc / L:.1f}x (on the H200 host: ~3-3.8x in fast "
              f"processes, 5-6.5x in slow ones, where host-bound columns are inflated)")
    b += ("; call x launch divides by the empty launch timed beside each call (floor_call_us in "
          "the json), not by this one")
    return f"{a}; {b}"


def render_md(meta, floors, records, args):
    out = ["# scangen benchmark", "",
           f"- GPU: {meta.get('gpu')}; torch {meta['torch']}, triton {meta.get('triton')}, CUDA {meta.get('cuda')}, "
           f"scangen {meta['scangen']} ({meta.get('git') or 'no git'}); {meta['date']}",
           f"- Floors: {floors_line(floors)}",
           f"- Method: scangen backend={args.backend!r}; do_bench(warmup={args.warmup_ms:g} ms, rep={args.rep_ms:g} ms, "
           f"median); inputs stored {args.layout}; input sets rotated up to {args.rotate_mb:g} MB; "
           f"torch.compile(backend={args.compile_backend!r}, "
           "dynamic=False, fullgraph=True), mode default; loop baseline host-timed. See bench/README.md.",
           f"- Elapsed {meta.get('elapsed_s', 0):.0f} s (torch.compile compile time {meta.get('compile_s', 0):.0f} s)"
           + (f"; **stopped early: {meta['fatal']}**" if meta.get("fatal") else ""), ""]
    for dt in [DTYPE_NAME[d] for d in args.dtypes]:
        rows = [r for r in records if r["dtype"] == dt]
        if not rows:
            continue
        out += [f"## {dt}", "", TABLE_HEAD] + [table_row(r) for r in rows] + [""]
    graphed = [r for r in records if "graph_us" in r.get("scangen", {}) or "graph_error" in r.get("scangen", {})]
    if graphed:
        out += ["## CUDA-graph replays (device time without the host)", "",
                "Each call captured in a CUDA graph (input sets rotated within the graph, no L2 flush "
                "between replays), `triton.testing.do_bench_cudagraph` median, beside the do_bench time above.",
                "", "| algo | N x T | dtype | trunc | do_bench us | graph us | % BW floor (graph) |",
                "|---|---|---|---|---:|---:|---:|"]
        for r in graphed:
            s_ = r["scangen"]
            g = s_.get("graph_us")
            pct = (f_pct(100 * r["floor_us"] / g) if g and r.get("floor_us") else "")
            out.append("| " + " | ".join(cell(x) for x in [
                short_name(r["algo"]), f"{r['N']}x{r['T']}", r["dtype"], r["trunc"], f_us(s_.get("us")),
                f_us(g) if g else f"ERR {s_.get('graph_error', '')}", pct]) + " |")
        out.append("")
    out += ["## PERF.md targets (fp32)", ""] + (targets(records, floors) or ["- (no fp32 measurements)"])
    out += dtype_ratio_line(records) + [""]
    return "\n".join(out)


def render_summary(meta, floors, records, args, out_dir):
    """Compact, printed last: the remote run returns only the tail of stdout."""
    dt = "fp32" if torch.float32 in args.dtypes else DTYPE_NAME[args.dtypes[0]]
    rows = [r for r in records if r["dtype"] == dt and r["trunc"] in ("yes", "-")]
    lines = [f"=== scangen bench summary: {dt}, with truncations (full tables: {out_dir}/bench.md) ===",
             f"{meta.get('gpu')} | torch {meta['torch']} | triton {meta.get('triton')} | {floors_line(floors)}",
             "algo                shape        floor  scangen  %BW  xL(dev) xL(call)  vs.compile  vs.loop  check"]
    for r in rows:
        d = r.get("derived", {})
        s = r.get("scangen", {})
        sc = "ERR" if s.get("error") else f_us(s.get("us"))
        if r.get("skipped"):
            sc = "not run"
        vc = f_x(d.get("vs_compile")) or ("ERR" if r.get("compile", {}).get("error") else
                                          "skip" if r.get("compile", {}).get("skipped") else "")
        vl = f_x(d.get("vs_loop")) or (("~" + f_x(d["vs_loop_est"])) if d.get("vs_loop_est") else "")
        chk = check_cell(r)
        lines.append(f"{short_name(r['algo']):<19} {str(r['N']) + 'x' + str(r['T']):<12} {f_us(r.get('floor_us')):>6} "
                     f"{sc:>8} {f_pct(d.get('pct_floor')):>4} {f_x(d.get('x_launch')):>7} "
                     f"{f_x(d.get('x_launch_call')):>8} {vc:>11} {vl:>8}  {chk[:48]}")
    lines += ["targets (PERF.md, fp32, all variants):"] + targets(records, floors) + dtype_ratio_line(records)
    n_err = sum(1 for r in records for p in ("scangen", "compile", "loop") if r.get(p, {}).get("error"))
    n_fail = sum(1 for r in records for p in ("scangen", "compile", "loop")
                 if r.get(p, {}).get("check") and not r[p]["check"].get("ok"))
    n_skip = sum(1 for r in records if r.get("skipped"))
    lines.append(f"{len(records)} configs, {n_err} errors, {n_fail} failed checks, {n_skip} not run; "
                 f"elapsed {meta.get('elapsed_s', 0):.0f} s, compile {meta.get('compile_s', 0):.0f} s"
                 + (f"; STOPPED EARLY: {meta['fatal']}" if meta.get("fatal") else ""))
    return "\n".join(lines)


def jsonable(x):
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def write_outputs(out_dir, meta, floors, records, args):
    settings = {k: (str(v) if not isinstance(v, (int, float, str, bool, type(None))) else v)
                for k, v in vars(args).items()}
    settings["shapes"] = [f"{n}x{t}" for n, t in args.shapes]
    settings["dtypes"] = [DTYPE_NAME[d] for d in args.dtypes]
    settings["loop_shapes"] = sorted(f"{n}x{t}" for n, t in args.loop_shapes)
    doc = {"meta": meta, "floors": floors, "settings": settings, "measurements": records}
    tmp = out_dir / "bench.json.tmp"
    tmp.write_text(json.dumps(jsonable(doc), indent=1))
    tmp.replace(out_dir / "bench.json")
    md = render_md(meta, floors, records, args)
    tmp = out_dir / "bench.md.tmp"
    tmp.write_text(md)
    tmp.replace(out_dir / "bench.md")
    meta_io.write_csv(out_dir / "bench.csv", [csv_row(r, meta, floors, args) for r in records], CSV_COLUMNS,
                      {k: meta.get(k) for k in CSV_META} | {"floors": floors_line(floors)})
    return md


# bench.csv: one row per configuration, the tables' cells as numbers (empty where not measured)
CSV_META = ("date", "host", "gpu", "torch", "triton", "cuda", "scangen", "git", "argv")
CSV_COLUMNS = ("date", "git", "gpu", "algo", "N", "T", "dtype", "trunc", "layout", "backend", "bytes", "floor_us",
               "scangen_us", "pct_floor", "x_launch", "call_us", "floor_call_us", "x_launch_call", "graph_us",
               "first_call_s", "compile_us", "compile_call_us", "compile_s", "scangen_us_beside_compile",
               "vs_compile", "vs_compile_call", "loop_us", "loop_estimate_us", "vs_loop", "vs_loop_est",
               "check_ref", "check_oracle", "ok", "copy_GBps", "launch_us", "launch_call_us", "check")


def csv_row(rec, meta, floors, args):
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    d, chk = rec.get("derived", {}), s.get("check", {})
    checks = [p["check"]["ok"] for p in (s, c, lp) if p.get("check")]
    return {"date": meta.get("date"), "git": meta.get("git"), "gpu": meta.get("gpu"), "algo": rec["algo"],
            "N": rec["N"], "T": rec["T"], "dtype": rec["dtype"], "trunc": rec["trunc"],
            "layout": args.layout, "backend": args.backend, "bytes": rec.get("bytes"),
            "floor_us": rec.get("floor_us"), "scangen_us": s.get("us"), "pct_floor": d.get("pct_floor"),
            "x_launch": d.get("x_launch"), "call_us": s.get("call_us"), "floor_call_us": s.get("floor_call_us"),
            "x_launch_call": d.get("x_launch_call"), "graph_us": s.get("graph_us"),
            "first_call_s": s.get("first_call_s"), "compile_us": c.get("us"), "compile_call_us": c.get("call_us"),
            "compile_s": c.get("compile_s"), "scangen_us_beside_compile": c.get("scangen_us"),
            "vs_compile": d.get("vs_compile"), "vs_compile_call": d.get("vs_compile_call"), "loop_us": lp.get("us"),
            "loop_estimate_us": lp.get("estimate_us"), "vs_loop": d.get("vs_loop"), "vs_loop_est": d.get("vs_loop_est"),
            "check_ref": chk.get("ref"), "check_oracle": chk.get("oracle"),
            "ok": all(checks) if checks and not rec.get("skipped") else None,
            "copy_GBps": floors.get("copy_bw_GBps"), "launch_us": floors.get("launch_us"),
            "launch_call_us": floors.get("launch_call_us"), "check": check_cell(rec)}


def progress_line(i, n, run, stage, rec):
    d = rec.get("derived", {})
    s, c, lp = rec.get("scangen", {}), rec.get("compile", {}), rec.get("loop", {})
    bits = [f"[{i:>3}/{n} {run.elapsed():5.0f}s] {stage:<7} {rec['dtype']} {short_name(rec['algo'])} "
            f"{rec['N']}x{rec['T']} trunc={rec['trunc']}"]
    if stage == "scangen":
        if s.get("us") is not None:
            bits.append(f"scangen {f_us(s['us'])} us ({f_pct(d.get('pct_floor'))} of BW floor, "
                        f"{f_x(d.get('x_launch'))} launch; call {f_us(s.get('call_us'))} us, "
                        f"{f_x(d.get('x_launch_call'))} launch; first call {s.get('first_call_s', 0):.1f} s)")
        if lp.get("us") is not None:
            bits.append(f"loop {f_us(lp['us'])} us ({f_x(d.get('vs_loop'))})")
    else:
        if c.get("us") is not None:
            bits.append(f"compile {f_us(c['us'])} us vs scangen {f_us(c.get('scangen_us'))} us "
                        f"({f_x(d.get('vs_compile'))}; built in {c.get('compile_s', 0):.1f} s)")
        elif c.get("skipped"):
            bits.append(f"compile skipped: {c['skipped']}")
    bits.append(check_cell(rec) or "-")
    return "  ".join(bits)
