"""``scangen bench``'s output: the CSV rows, a progress bar, the text table and the chart.

The chart is drawn from rows alone (those of a run, or read back from its CSV), so
``scangen bench --from-csv FILE --plot FILE.png`` redraws it without measuring anything.
matplotlib is imported only to draw (``pip install matplotlib``).
"""
from __future__ import annotations

import csv
import math
import sys
import time

from . import meta

COLUMNS = ("date", "host", "cpu", "gpu", "cores", "commit", "scangen", "python", "torch", "numpy", "numba",
           "triton", "device", "threads", "cache_MiB", "floor_MiB", "algo", "N", "T", "dtype", "layout", "impl",
           "backend", "median_ms", "min_ms", "max_ms", "rounds", "first_call_ms", "bytes", "floor_ms", "copy_GBps",
           "pct_of_floor", "speedup", "check", "err_x_tol", "check_steps", "estimated", "note")
INTS = ("cores", "threads", "N", "T", "rounds", "bytes")
FLOATS = ("cache_MiB", "floor_MiB", "median_ms", "min_ms", "max_ms", "first_call_ms", "floor_ms", "copy_GBps",
          "pct_of_floor", "speedup", "err_x_tol")
ORDER = ("scangen", "scangen_torch", "compiled_scan", "torch_loop", "numpy_loop")
SHORT = {"scangen": "scangen", "scangen_torch": "torch path", "compiled_scan": "compiled scan",
         "torch_loop": "torch loop", "numpy_loop": "numpy loop"}
COLORS = {"scangen": "#d62728", "scangen_torch": "#9467bd", "compiled_scan": "#2ca02c", "torch_loop": "#1f77b4",
          "numpy_loop": "#ff7f0e"}
PLOT_EXTRA = ('matplotlib is needed to draw the chart: pip install "matplotlib>=3.7" (or, in '
              'scangen\'s checkout, pip install -e ".[plot]")')


# ---------------------------------------------------------------------------------------------
# CSV


def write_csv(path, rows) -> None:
    """One row per implementation and configuration (COLUMNS), written atomically."""
    meta.write_csv(path, rows, COLUMNS)


def read_csv(path) -> list[dict]:
    """Rows of a CSV that ``write_csv`` wrote (lines starting with ``#`` skipped), typed back."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    if rows and not {"algo", "N", "T", "impl", "pct_of_floor", "speedup"} <= set(rows[0]):
        raise ValueError(f"{path}: not a `scangen bench` CSV (its columns: {', '.join(rows[0])})")
    for r in rows:
        for k in INTS:
            r[k] = int(r[k]) if r.get(k) not in (None, "") else None
        for k in FLOATS:
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
        r["estimated"] = r.get("estimated") == "True"
    return rows


# ---------------------------------------------------------------------------------------------
# progress


class Progress:
    """A progress bar over the configurations: tqdm where it is installed, else a one-line
    counter on stderr. ``done(line)`` counts a finished configuration and prints its line on
    stdout."""

    def __init__(self, total, stream=None):
        self.total, self.n, self.t0 = total, 0, time.perf_counter()
        self.stream = stream or sys.stderr
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, unit="config", desc="scangen bench", file=self.stream, leave=False)
        self._width = 0

    def start(self, label):
        if self.bar is not None:
            self.bar.set_postfix_str(label)
            return
        text = f"[{self.n + 1}/{self.total} {time.perf_counter() - self.t0:.0f}s] {label} ..."
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def write(self, line):
        """A line on stdout, above the bar."""
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
            return
        self._clear()
        print(line, flush=True)

    def done(self, line):
        """One more configuration finished: its line."""
        self.n += 1
        self.write(line)
        if self.bar is not None:
            self.bar.update(1)

    def _clear(self):
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def close(self):
        if self.bar is not None:
            self.bar.close()
        self._clear()


# ---------------------------------------------------------------------------------------------
# text


def fmt_ms(ms):
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def fmt_pct(p):
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return f"{p:.2g}%" if p < 10 else f"{p:.0f}%"


def fmt_x(r, est=False):
    if r is None or (isinstance(r, float) and math.isnan(r)):
        return "-"
    return ("~" if est else "") + (f"{r:.2g}x" if r < 10 else f"{r:.0f}x")


def groups(rows) -> dict:
    """{(algo, N, T, dtype, layout): {impl: row}} in run order."""
    out = {}
    for r in rows:
        out.setdefault((r["algo"], r["N"], r["T"], r["dtype"], r["layout"]), {})[r["impl"]] = r
    return out


def cfg_name(key) -> str:
    algo, N, T, dtype, layout = key
    return f"{algo.removeprefix('compute_')} {N}x{T} {dtype} {layout}"


def cell(row) -> str:
    """A baseline's cell: scangen's speed-up over it, or why there is none."""
    if row is None:
        return "-"
    if row["check"] != "ok":
        return "CHECK FAILED" if row["check"] == "failed" else "ERROR"
    return fmt_x(row["speedup"], row["estimated"])


def config_line(cfg_rows) -> str:
    key, d = next(iter(groups(cfg_rows).items()))
    sg = d.get("scangen", {})
    head = f"{cfg_name(key)}: scangen "
    if sg.get("check") == "ok":
        head += f"{fmt_ms(sg['median_ms'])} ms ({fmt_pct(sg['pct_of_floor'])} of floor)"
    else:
        head += f"CHECK {'FAILED' if sg.get('check') == 'failed' else 'ERROR'}, not timed"
    parts = [f"{fmt_x(r['speedup'], r['estimated'])} {SHORT[k]}" if r["check"] == "ok" and r["speedup"]
             else f"{SHORT[k]} {cell(r)}" for k, r in d.items() if k != "scangen"]
    return head + "".join(f" | {p}" for p in parts)


def table(rows) -> str:
    """One line per configuration: scangen's time and % of floor, its speed-up over each baseline."""
    cfgs = groups(rows)
    impls = [k for k in ORDER if any(k in d for d in cfgs.values()) and k != "scangen"]
    head = ["configuration", "scangen ms", "% of floor", *(f"x {SHORT[k]}" for k in impls)]
    body = []
    for key, d in cfgs.items():
        sg = d.get("scangen")
        ok = sg is not None and sg["check"] == "ok"
        body.append([cfg_name(key), fmt_ms(sg["median_ms"]) if ok else cell(sg),
                     fmt_pct(sg["pct_of_floor"]) if ok else "-", *(cell(d.get(k)) for k in impls)])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(line, widths)))
             for line in [head, *body]]
    return "\n".join(lines)


def failures(rows) -> list[str]:
    keys = ("algo", "N", "T", "dtype", "layout")
    return [f"{cfg_name(tuple(r[k] for k in keys))} {r['impl']}: check {r['check']}: {r['note']}"
            for r in rows if r["check"] != "ok"]


def header(rows) -> str:
    r = rows[0]
    where = r.get("gpu") or r.get("cpu")
    return (f"# {where} ({r['device']}, {r['threads']} thread(s)); scangen {r['scangen']}, commit "
            f"{r['commit'] or '-'}; torch {r['torch']}, numba {r['numba']}, triton {r['triton']}; "
            f"floor: copy of {r['floor_MiB']:.0f} MiB at {r['copy_GBps']:.1f} GB/s")


# ---------------------------------------------------------------------------------------------
# chart


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(PLOT_EXTRA) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def require_matplotlib():
    """Fail before measuring when the chart could not be drawn afterwards."""
    _pyplot()


def plot(rows, path) -> None:
    """Two panels over the configurations: % of the copy-bandwidth floor of every implementation,
    and scangen's speed-up over each baseline (log scales; lines break between algorithms,
    dtypes and layouts; ``~`` marks a loop timed over a window of T and scaled; a point is
    missing where the check failed)."""
    plt = _pyplot()
    cfgs = groups(rows)
    keys = list(cfgs)
    vary = [i for i in (3, 4) if len({k[i] for k in keys}) > 1]  # dtype / layout in the labels if they vary
    labels = [f"{k[0].removeprefix('compute_')}\n{k[1]}x{k[2]}" + "".join(f"\n{k[i]}" for i in vary) for k in keys]
    segments, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or (keys[i][0], keys[i][3], keys[i][4]) != (keys[start][0], keys[start][3], keys[start][4]):
            segments.append(range(start, i))
            start = i
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10.0, 1.3 * len(keys) + 3), 5.2), layout="constrained")
    impls = [k for k in ORDER if any(k in d for d in cfgs.values())]
    backend = next((d["scangen"]["backend"] for d in cfgs.values() if d.get("scangen", {}).get("backend")), None)

    def value(key, impl, col):
        r = cfgs[key].get(impl)
        ok = r is not None and r["check"] == "ok" and r[col]
        return (r[col], r["estimated"]) if ok else (math.nan, False)

    def lines(ax, names, col, fmt, labelled):
        for impl in names:
            label = SHORT[impl] + (f" ({backend})" if impl == "scangen" and backend else "")
            for j, seg in enumerate(segments):
                vals = [value(keys[i], impl, col) for i in seg]
                ax.plot(list(seg), [y for y, _ in vals], marker="o", color=COLORS[impl],
                        label=label if j == 0 else None)
                for x, (y, est) in zip(seg, vals):
                    if impl in labelled and not math.isnan(y):  # beside the point: neighbours differ in y
                        ax.annotate(("~" if est else "") + fmt(y), (x, y), textcoords="offset points",
                                    xytext=(6, 0), ha="left", va="center", fontsize=7, color=COLORS[impl])
        ax.set_yscale("log")
        ax.set_xticks(range(len(keys)), labels, fontsize=8)
        ax.set_xlim(-0.5, len(keys) - 0.5)
        for seg in segments[1:]:
            ax.axvline(seg.start - 0.5, color="0.85", lw=0.8)
        ax.grid(axis="y", which="both", color="0.93")
        ax.legend(fontsize=8)

    lines(ax1, impls, "pct_of_floor", fmt_pct, labelled=("scangen",))
    ax1.axhline(100, color="0.5", ls="--", lw=0.8)
    ax1.set_ylabel("% of the copy-bandwidth floor (higher is better)")
    ax1.set_title("Time against the bandwidth floor (bytes in + out / copy bandwidth)", fontsize=9)
    baselines = [k for k in impls if k != "scangen"]
    lines(ax2, baselines, "speedup", fmt_x, labelled=baselines)
    ax2.axhline(1, color="0.5", ls="--", lw=0.8)
    ax2.set_ylabel("speed-up of scangen (baseline time / scangen time)")
    ax2.set_title("scangen's speed-up over each baseline", fontsize=9)
    r = rows[0]
    fig.suptitle(f"scangen bench on {r.get('gpu') or r.get('cpu')}: {r['device']}, {r['threads']} thread(s), "
                 f"median of {max(x['rounds'] or 0 for x in rows)} rounds; scangen {r['scangen']} "
                 f"({r['commit'] or 'no commit'}), torch {r['torch']}, {str(r['date'])[:10]}", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)
