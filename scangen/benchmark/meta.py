"""Bookkeeping of scangen's benchmarks: the machine, the versions and the commit measured, CSV
output (``# key: value`` header lines, then one row per measurement), and a child process that
reports its own timings as JSON (fresh-process first calls).
"""
from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time

import torch



def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", socket.gethostname().split(".")[0]).strip("-")[:24] or "host"


def git_commit(root, paths=("scangen", "generated", "templates", "specs")) -> str | None:
    """Short HEAD commit of ``root``, with ``+dirty`` when ``paths`` have uncommitted changes
    (``SCANGEN_REV`` overrides: a copied tree's .git may be stale)."""
    if os.environ.get("SCANGEN_REV"):
        return os.environ["SCANGEN_REV"]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev + "+dirty" if dirty else rev) or None
    except Exception:  # noqa: BLE001
        return None


def versions(packages) -> dict:
    out = {"python": platform.python_version()}
    for p in packages:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = None
    return out


def gpu_model(device="cuda") -> str | None:
    try:
        return torch.cuda.get_device_name(device) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        return None


def machine_meta(root, packages=("torch", "numpy", "numba", "torchrl", "scangen"), device=None) -> dict:
    """Date, host, CPU (and the GPU of a CUDA ``device``), cores, commit of ``root``, versions."""
    gpu = {"gpu": gpu_model(device)} if device is not None and str(device).startswith("cuda") else {}
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "cpu": cpu_model(), **gpu, "cores": os.cpu_count(),
            "commit": git_commit(root), **versions(packages), "argv": " ".join(sys.argv)}


def write_csv(path, rows, columns, meta=None) -> None:
    """``rows`` (dicts) as CSV under a ``# key: value`` header comment (pandas: comment="#")."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        for k, v in (meta or {}).items():
            f.write(f"# {k}: {v}\n")
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: fmt_cell(r.get(k)) for k in columns})
    os.replace(tmp, path)


def fmt_cell(v):
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return "" if v is None else v


def run_child(code, cwd=None, env=None, timeout=300) -> dict:
    """Run ``python -c code`` in a fresh interpreter; its last stdout line is a JSON object of
    its own timings. Adds ``wall_s`` (the whole child, interpreter start included)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**os.environ, **(env or {})},
                       capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1], "wall_s": wall}
    return {**json.loads(lines[-1]), "wall_s": wall}
