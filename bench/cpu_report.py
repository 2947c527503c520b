"""The CPU benchmark's summary (bench/cpu.py): a table per layout and thread count, the
issue-19 targets, the first calls in this process and in fresh ones. The CSV itself is
scangen.benchmark.meta.write_csv's.
"""
from __future__ import annotations

import math

SHORT = {"numba_backend": "numba", "numba_backend_1t": "numba 1t", "torch_path": "torch path",
         "numpy_loop": "numpy loop", "verl_loop": "verl loop", "torchrl_vec": "TorchRL vec",
         "torchrl_loop": "TorchRL loop", "hand_numba": "hand numba"}
VERSUS = ("torch_path", "numpy_loop", "verl_loop", "torchrl_vec", "torchrl_loop")


def fmt_ms(ms):
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def fmt_x(r, est=False, ok=True):
    if r is None or math.isnan(r):
        return "-"
    text = f"{r:.2g}x" if r < 10 else f"{r:.0f}x"
    return ("~" if est else "") + text + ("" if ok else " FAIL")


def by_impl(cfg_rows):
    return {r["impl"]: r for r in cfg_rows}


def fresh_text(run):
    if "error" in run:
        return f"error: {run['error']}"
    return (f"import torch {run['import_torch_s']:.2f} s, scangen {run['import_scangen_s']:.2f} s; first call "
            f"{run['first_call_s']:.2f} s (op lookup {run['lookup_s']:.2f} s + call {run['call_s']:.2f} s); "
            f"second {run['second_call_s'] * 1e3:.1f} ms")


def progress_line(cfg_rows):
    d, r0 = by_impl(cfg_rows), cfg_rows[0]
    nb = d.get("numba_backend", {})
    head = (f"{r0['algo'].removeprefix('compute_')} {r0['N']}x{r0['T']} {r0['layout']} {r0['threads']}t: numba "
            f"{fmt_ms(nb.get('median_ms'))} ms ({nb.get('pct_of_floor', math.nan):.0f}% of floor)")
    parts = [f"{SHORT[k]} {fmt_x(v['ratio_to_numba_backend'], v['estimated'], v['ok'])}"
             for k, v in d.items() if k not in ("numba_backend", "floor")]
    bad = [f"{k}: {v['note']}" for k, v in d.items() if not v["ok"]]
    return head + " | " + " | ".join(parts) + (f" | NOT OK: {'; '.join(bad)}" if bad else "")


def groups(rows):
    """{(algo, N, T, layout, threads): {impl: row}} in run order."""
    out = {}
    for r in rows:
        out.setdefault((r["algo"], r["N"], r["T"], r["layout"], r["threads"]), {})[r["impl"]] = r
    return out


def table(cfgs, threads):
    multi = threads > 1
    head = ["algo", "N x T", "numba ms", "% floor", *(f"x {SHORT[k]}" for k in VERSUS), "numba / hand",
            *(["x 1 thread"] if multi else []), "first call ms", "checks"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (algo, N, T, _, _), d in cfgs.items():
        nb, hand = d.get("numba_backend"), d.get("hand_numba")
        if nb is None:
            continue
        cells = [algo.removeprefix("compute_"), f"{N} x {T}", fmt_ms(nb["median_ms"]), f"{nb['pct_of_floor']:.0f}%"]
        cells += [fmt_x(d[k]["ratio_to_numba_backend"], d[k]["estimated"], d[k]["ok"]) if k in d else "-"
                  for k in VERSUS]
        cells.append(fmt_x(1 / hand["ratio_to_numba_backend"], ok=hand["ok"]) if hand else "-")
        if multi:
            one = d.get("numba_backend_1t")
            cells.append(fmt_x(one["ratio_to_numba_backend"], ok=one["ok"]) if one else "-")
        cells.append(fmt_ms(nb["first_call_ms"]))
        bad = [SHORT.get(k, k) for k, v in d.items() if not v["ok"]]
        cells.append("ok" if not bad else "FAIL: " + ", ".join(bad))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def target_lines(rows, fresh):
    cfgs = groups(rows)
    one = {k: d for k, d in cfgs.items() if k[4] == 1 and k[1] * k[2] >= 65536 and "numba_backend" in d}
    checks = [("numba >= 10x the torch path", one, lambda d: d["torch_path"]["ratio_to_numba_backend"] >= 10,
               "torch_path"),
              ("numba >= 5x the numpy loop", one, lambda d: d["numpy_loop"]["ratio_to_numba_backend"] >= 5,
               "numpy_loop"),
              ("numba within 2x of the hand loop", one, lambda d: d["hand_numba"]["ratio_to_numba_backend"] >= 0.5,
               "hand_numba"),
              ("numba >= 40% of the copy floor (>= 1M elements)",
               {k: d for k, d in one.items() if k[1] * k[2] >= 2 ** 20},
               lambda d: d["numba_backend"]["pct_of_floor"] >= 40, "numba_backend")]
    lines = ["One thread, fp32, shapes of >= 64k elements (speed-ups are medians of one process, interleaved):", ""]
    for label, cs, ok, need in checks:
        have = {k: d for k, d in cs.items() if need in d}
        fails = [k for k, d in have.items() if not ok(d)]
        lines.append(f"- {label}: met in {len(have) - len(fails)} of {len(have)} configurations"
                     + (f"; not met: {', '.join(cfg_name(k) for k in fails)}" if fails else ""))
    multi = {k: d for k, d in cfgs.items() if k[4] > 1 and (k[1], k[2]) in ((4096, 128), (1024, 1024))
             and "numba_backend_1t" in d}
    fails = [k for k, d in multi.items() if d["numba_backend_1t"]["ratio_to_numba_backend"] < 1.6]
    lines.append(f"- all threads >= 1.6x one thread at 4096x128 and 1024x1024: met in {len(multi) - len(fails)} "
                 f"of {len(multi)}" + (f"; not met: {', '.join(cfg_name(k) for k in fails)}" if fails else ""))
    runs = [f["runs"][-1] for f in fresh]
    fails = [f for f, r in zip(fresh, runs) if "error" in r or r["first_call_s"] >= 0.5]
    call_ok = sum(1 for r in runs if "error" not in r and r["call_s"] < 0.5)
    lines.append(f"- fresh-process first call < 0.5 s (numba disk cache warm; op lookup + call): met in "
                 f"{len(runs) - len(fails)} of {len(runs)}"
                 + (f"; not met: {', '.join(f['algo'] + ' ' + f['layout'] for f in fails)}" if fails else "")
                 + (f" (the call alone, without the lookup: met in {call_ok} of {len(runs)})" if runs else ""))
    return lines


def cfg_name(k):
    algo, N, T, layout, threads = k
    return f"{algo.removeprefix('compute_')} {N}x{T} {layout} {threads}t"


def first_call_lines(rows):
    """The first call of each implementation in its first configuration of each algorithm and
    layout (numba compiles there, or loads its disk cache), against its steady state."""
    seen = set()
    lines = ["| algo | layout | impl | first call ms | steady ms | config |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        key = (r["algo"], r["layout"], r["impl"])
        if r["impl"] in ("floor",) or key in seen or r["first_call_ms"] is None:
            continue
        seen.add(key)
        if r["impl"] in ("numba_backend", "torch_path", "hand_numba"):
            lines.append(f"| {r['algo'].removeprefix('compute_')} | {r['layout']} | {SHORT[r['impl']]} | "
                         f"{fmt_ms(r['first_call_ms'])} | {fmt_ms(r['median_ms'])} | "
                         f"{r['N']}x{r['T']} {r['threads']}t |")
    return lines


def render(meta, rows, fresh, numba_import, args):
    out = [f"# CPU benchmark, {meta['date']}", "",
           f"- machine: {meta['host']}, {meta['cpu']}, {meta['cores']} cores; commit {meta['commit']}",
           f"- python {meta['python']}, torch {meta['torch']}, numpy {meta['numpy']}, numba {meta['numba']} "
           f"(threading layer {meta['numba_threading_layer']}), torchrl {meta['torchrl']} "
           f"(importable: {meta['torchrl_importable']})",
           f"- command: `{meta['argv']}`",
           f"- fp32, {args.term_rate:.0%} terminations, {args.trunc_rate:.0%} truncations; GAE computes advantages "
           f"and returns everywhere, the others the ops' default outputs; input sets rotated up to "
           f"{args.rotate_mb:g} MB",
           f"- numba disk cache of the generated kernels present before the run: {meta['numba_disk_cache_before_run']}",
           f"- load average (1, 5, 15 min) at the start {meta['loadavg_start']}, at the end {meta.get('loadavg_end')}; "
           f"environment {meta['env']}",
           "", "Columns: `x <impl>` = that implementation's median / the numba backend's median (speed-up of the "
           "numba backend; `~` timed over a window of T and scaled; `FAIL` its check failed); `numba / hand` = numba "
           "backend / hand-written numba loop (<= 2x is the target); `% floor` = (bytes in + out / copy bandwidth "
           "of the same thread count, measured in the same round-robin) / numba median; `x 1 thread` = the numba "
           "backend pinned to one thread / all threads, interleaved. Medians of "
           f"{args.rounds} rounds of ~{args.sample_ms:g} ms samples.", ""]
    cfgs = groups(rows)
    for threads in args.threads:
        for layout in args.layouts:
            sub = {k: d for k, d in cfgs.items() if k[3] == layout and k[4] == threads}
            if sub:
                out += [f"## {layout}, {threads} thread(s)", "", *table(sub, threads), ""]
    out += ["## Targets (issue 19)", "", *target_lines(rows, fresh), ""]
    out += ["## First calls", "", "In this process (numba compiles, or loads its disk cache):", "",
            *first_call_lines(rows), ""]
    if fresh:
        out += ["In a fresh `python -c` process: `import torch`, `import scangen`, then `scangen.<op>(...)` twice "
                "(first call = the attribute lookup, which loads the op's generated module, + the call, which "
                "imports numba and compiles the kernel or loads it from numba's disk cache); cold: "
                "`NUMBA_CACHE_DIR` an empty directory; warm: the generated kernels' own cache; shape "
                f"{args.fresh_shape[0]}x{args.fresh_shape[1]}, {args.threads[0]} thread(s):", "",
                "| algo | layout | cold disk cache (numba compiles) | warm disk cache |", "| --- | --- | --- | --- |"]
        out += [f"| {f['algo'].removeprefix('compute_')} | {f['layout']} | "
                + " | ".join(fresh_text(r) for r in f["runs"]) + " |" for f in fresh]
        if numba_import:
            out += ["", f"`import numba` alone (after torch) in a fresh process: "
                        f"{numba_import.get('import_numba_s', float('nan')):.2f} s."]
        out.append("")
    bad = [r for r in rows if not r["ok"]]
    if bad:
        out += ["## Failed checks and errors", ""]
        out += [f"- {cfg_name((r['algo'], r['N'], r['T'], r['layout'], r['threads']))} {r['impl']}: ref "
                f"{r['check_ref']}, oracle {r['check_oracle']} (x tolerance) {r['note']}" for r in bad]
        out.append("")
    worst = max((r.get("oracle_vs_ref") or 0.0 for r in rows), default=0.0)
    out.append(f"The float64 oracle (hand loop on float64 copies) against the float64 reference: worst "
               f"{worst:.2g} x float64 tolerance.")
    return "\n".join(out) + "\n"


