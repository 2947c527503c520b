"""``scangen bench``: it checks before it times, reports a wrong result instead of timing it,
writes its CSV and draws its chart, also from a CSV alone. One tiny shape on the CPU, one
round: no timing is asserted."""
import csv
import importlib.util
import re
import io
import sys
from pathlib import Path

import pytest
import torch

import scangen
from scangen import cli
from scangen.benchmark import timing
from scangen.runtime import numba as numbapath
from scangen.benchmark import baselines, report, suite
from test_examples import OPTIONAL  # the integrations' libraries, which a machine may lack

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--shapes", "4x64", "--device", "cpu", "--threads", "1", "--quick", "--rounds", "1", "--floor-mb", "4"]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
PNG = b"\x89PNG\r\n\x1a\n"


def bench(*args):
    return cli.main(["bench", *args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run of two algorithms (with --plot where matplotlib is installed): its CSV, its chart."""
    out = tmp_path_factory.mktemp("bench")
    csv_path, png = out / "run.csv", out / "run.png"
    assert bench("gae", "masked_gae", *TINY, "--csv", str(csv_path), *(["--plot", str(png)] if HAS_MPL else [])) == 0
    return csv_path, png


def test_csv_has_one_checked_row_per_implementation(run):
    with open(run[0], newline="") as f:
        assert tuple(next(csv.reader(f))) == report.COLUMNS
    for col in ("host", "cpu", "commit", "scangen", "torch", "numba", "median_ms", "pct_of_floor", "speedup"):
        assert col in report.COLUMNS
    rows = report.read_csv(run[0])
    assert sorted((r["algo"], r["impl"]) for r in rows) == sorted(
        [("compute_gae", i) for i in ("scangen", "scangen_torch", "torch_loop", "numpy_loop")]
        + [("compute_masked_gae", i) for i in ("scangen", "scangen_torch", "torch_loop")])  # no numpy loop of it
    for r in rows:
        assert (r["N"], r["T"], r["dtype"], r["layout"], r["device"], r["threads"]) == (4, 64, "float32", "rows",
                                                                                      "cpu", 1)
        assert r["check"] == "ok", r["note"]
        assert r["median_ms"] > 0 and r["pct_of_floor"] > 0 and r["copy_GBps"] > 0 and r["err_x_tol"] <= 1
        assert (r["speedup"] is None) == (r["impl"] == "scangen")
    assert {r["backend"] for r in rows if r["impl"] == "scangen"} == {"numba" if numbapath.available() else "torch"}


def test_a_wrong_baseline_is_reported_and_not_timed(tmp_path, monkeypatch, capsys):
    calls = []

    def wrong(**kw):
        calls.append(1)
        return torch.zeros_like(kw["rewards"])

    monkeypatch.setitem(baselines.LOOPS, "compute_gae", wrong)
    path = tmp_path / "wrong.csv"
    assert bench("gae", *TINY, "--csv", str(path)) == 1
    out = capsys.readouterr().out
    assert "CHECK FAILED (not timed): gae 4x64 float32 rows torch_loop: check failed: output 0" in out
    assert "torch loop CHECK FAILED" in out
    assert len(calls) == 1  # the checked call, never a timed one
    rows = {r["impl"]: r for r in report.read_csv(path)}
    assert rows["torch_loop"]["check"] == "failed" and rows["torch_loop"]["median_ms"] is None
    assert "elements differ" in rows["torch_loop"]["note"]
    assert rows["scangen"]["check"] == "ok" and rows["scangen"]["median_ms"] > 0
    assert rows["numpy_loop"]["check"] == "ok" and rows["numpy_loop"]["speedup"] > 0


def test_a_wrong_scangen_result_is_reported_and_not_timed(tmp_path, monkeypatch, capsys):
    right = scangen.compute_masked_gae

    def wrong(*args, **kw):
        adv, ret = right(*args, **kw)
        return adv + 1, ret

    monkeypatch.setattr(scangen, "compute_masked_gae", wrong)
    path = tmp_path / "wrong.csv"
    assert bench("masked_gae", *TINY, "--baselines", "torch_loop", "--csv", str(path)) == 1
    out = capsys.readouterr().out
    assert "masked_gae 4x64 float32 rows: scangen CHECK FAILED, not timed" in out
    assert "CHECK FAILED (not timed): masked_gae 4x64 float32 rows scangen: check failed" in out
    rows = {r["impl"]: r for r in report.read_csv(path)}
    assert rows["scangen"]["check"] == "failed" and rows["scangen"]["median_ms"] is None
    assert rows["torch_loop"]["check"] == "ok" and rows["torch_loop"]["speedup"] is None  # nothing to compare with


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_dtypes_are_checked_against_their_rounded_inputs(dtype, tmp_path):
    """A bf16 / fp16 call reads inputs rounded to its dtype: the float64 reference reads the same
    rounded inputs (it read the float64 draw, and every implementation's bf16 check failed,
    docs/cli.md's example included); half dtypes have no numpy loop (float16 arithmetic)."""
    path = tmp_path / "half.csv"
    args = ["--shapes", "64x512", "--device", "cpu", "--threads", "1", "--quick", "--rounds", "1",
            "--floor-mb", "4", "--dtype", dtype, "--layout", "rows,time-major", "--csv", str(path)]
    assert bench("gae", "vtrace", *args) == 0
    rows = report.read_csv(path)
    assert {(r["algo"], r["layout"]) for r in rows} == {
        (a, lay) for a in ("compute_gae", "compute_vtrace") for lay in ("rows", "time-major")}
    assert all(r["check"] == "ok" and r["dtype"] == dtype for r in rows), [
        (r["algo"], r["impl"], r["note"]) for r in rows if r["check"] != "ok"]
    assert "numpy_loop" not in {r["impl"] for r in rows}


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_plot_writes_a_png(run):
    assert run[1].read_bytes()[:8] == PNG


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_from_csv_redraws_without_measuring(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(suite, "run", lambda *a, **k: pytest.fail("--from-csv measured"))
    png = tmp_path / "again.png"
    assert bench("--from-csv", str(run[0]), "--plot", str(png)) == 0
    assert png.read_bytes()[:8] == PNG
    out = capsys.readouterr().out
    assert "gae 4x64 float32 rows" in out and "masked_gae 4x64 float32 rows" in out


def test_without_matplotlib_plot_names_the_extra_before_measuring(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setattr(suite, "run", lambda *a, **k: pytest.fail("measured before failing"))
    assert bench("gae", *TINY, "--plot", str(tmp_path / "x.png")) == 2
    assert 'pip install "matplotlib>=3.7"' in capsys.readouterr().err


def test_bad_options_are_errors(capsys):
    assert bench("nope", *TINY) == 2
    assert "unknown algorithm(s) compute_nope" in capsys.readouterr().err
    assert bench("gae", "--shapes", "4by64", "--device", "cpu") == 2
    assert "--shapes takes NxT" in capsys.readouterr().err
    assert bench("gae", "--device", "cpu", "--baselines", "numpy_loop,nope") == 2


def test_progress_without_tqdm_is_a_counter_on_stderr(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    err = io.StringIO()
    p = report.Progress(2, stream=err)
    p.start("gae 4x64 float32 rows")
    p.done("first line")
    p.start("vtrace 4x64 float32 rows")
    p.close()
    assert "[1/2 0s] gae 4x64 float32 rows ..." in err.getvalue()
    assert "[2/2 0s] vtrace" in err.getvalue()
    assert capsys.readouterr().out == "first line\n"


def test_bench_scripts_import_the_package_library():
    """The developer benchmarks (bench/*.py, bench/dev/*.py) take their timing, floors and checks
    from scangen.benchmark: no script keeps a copy of them, and no re-export shim is left."""
    assert not (ROOT / "bench" / "timing.py").exists()
    assert not (ROOT / "bench" / "baselines.py").exists()
    scripts = sorted((ROOT / "bench").glob("*.py")) + sorted((ROOT / "bench" / "dev").glob("*.py"))
    assert len(scripts) >= 8
    copies = re.compile(r"^def (error_ratio|tol_ratio|interleaved|device_interleaved|call_us|"
                        r"device_us|paired_call_us|measure_floors|checked)\(|^(import timing|"
                        r"import baselines|from timing import|from baselines import)", re.M)
    for path in scripts:
        found = copies.findall(path.read_text())
        assert not found, f"{path.relative_to(ROOT)}: {found}"
    for name in ("bench.py", "cpu.py"):
        assert "scangen.benchmark" in (ROOT / "bench" / name).read_text()



ALLOCATOR_PROBE = r"""
import ctypes, json, re, sys
from scangen.benchmark import timing
fns = timing._libc_malloc()
libc = ctypes.CDLL(None)
if fns is None or not hasattr(libc, "malloc_info"):
    print(json.dumps(None)); sys.exit()
malloc, free = fns
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
report, buf = sys.argv[1], ctypes.create_string_buffer(1 << 20)

def opened():  # the report's FILE and its buffer taken before the frees: a stdio buffer from
    f = libc.fopen(report.encode(), b"w")  # malloc (4 KB) would itself merge the fast bins
    libc.setvbuf(f, buf, 0, len(buf))
    return f

def fast_blocks(f):  # the last <total type="fast"> counts every arena's
    libc.malloc_info(0, f)
    libc.fclose(f)
    return int(re.findall(r'<total type="fast" count="(\d+)"', open(report).read())[-1])

ptrs = (ctypes.c_void_p * 2000)()  # no list of them: freeing a list's array next to the heap's
                                   # top would itself merge the fast bins

def frees_small_blocks():  # beyond the thread cache's 7 a size: fast bins
    for i in range(len(ptrs)):
        ptrs[i] = malloc(48)
    for p in ptrs:
        free(p)

counts = []
f = opened(); frees_small_blocks(); counts.append(fast_blocks(f))
f = opened(); frees_small_blocks(); timing.settle_allocator(); counts.append(fast_blocks(f))
f = opened(); timing.block_time(frees_small_blocks, 3); counts.append(fast_blocks(f))
print(json.dumps(counts))
"""


def test_a_timed_block_pays_for_the_allocators_deferred_work(tmp_path):
    """timing.block_time settles glibc's malloc inside the block (timing.settle_allocator): the
    small blocks a callable freed are merged before the block's clock stops, not at the next
    callable's first allocation (a per-step torch loop left 19-20 ms to whoever came next:
    bench/CPU.md). Counted with glibc's malloc_info in a process of its own (under pytest-xdist
    another thread's allocations may merge the fast bins between the frees and the count)."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE, str(tmp_path / "malloc_info.xml")],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    if counts is None:
        pytest.skip("glibc only (malloc, malloc_info)")
    left, settled, timed = counts
    assert left > 1000  # what a block leaves behind without the settle
    assert settled == 0 and timed == 0


def _top_level_names(path: Path) -> set[str]:
    """The names a Python file defines at its top level (functions, classes, assignments,
    imports), read from its syntax tree without running it."""
    import ast
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").rglob("*.py")))
def test_bench_scripts_import_what_exists(script):
    """Every name a benchmark script imports from scangen or from a script beside it exists
    (the scripts run on the GPU machine only, so a helper renamed here would otherwise surface
    there first): checked from the syntax tree, without running the script."""
    import ast
    import importlib
    (path,) = [p for p in (ROOT / "bench").rglob(script)]
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        sibling = path.parent / f"{node.module}.py"
        if sibling.exists():
            have = _top_level_names(sibling)
            missing = [a.name for a in node.names if a.name not in have]
        elif node.module.split(".")[0] == "scangen":
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:  # an integration whose library this machine lacks
                missing_lib = getattr(exc.__cause__, "name", None) or ""
                if missing_lib.split(".")[0] in OPTIONAL:
                    pytest.skip(f"{node.module} needs {missing_lib}, not installed here")
                raise
            missing = [a.name for a in node.names if not hasattr(module, a.name)
                       and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
        else:
            continue
        assert not missing, f"{path.relative_to(ROOT)}: from {node.module} import {missing}"


def test_calibration_is_not_set_by_a_first_calls_one_off_work(monkeypatch):
    """timing.calibrate sized a sample by one call; scangen's second call of a signature builds
    its fast path, and the CPU's GAE 4096x128 was then timed one cold call a sample (4.3 ms
    against 2.3 in blocks of eight). The block times are scripted here, not measured."""
    script = {1: [0.050, 0.001, 0.001]}  # seconds: one-off work in the first call, then fast

    def fake_block_time(fn, n, sync=None):
        return script[n].pop(0) if n == 1 else 0.001

    monkeypatch.setattr(timing, "block_time", fake_block_time)
    assert timing.calibrate(lambda: None, 0.02) == 20
    script[1] = [3.0]  # a slow callable: one call, not three
    assert timing.calibrate(lambda: None, 0.02) == 1 and script[1] == []


def test_default_sizes_span_the_cache_and_stay_bounded_on_the_cpu():
    from scangen.benchmark.suite import default_sizes
    MiB = 1 << 20
    # a small cache: the floors' minimums
    assert default_sizes("cpu", 32 * MiB) == (256 * MiB, 64 * MiB)
    # source and destination together span four times the cache
    assert default_sizes("cpu", 300 * MiB) == (600 * MiB, 600 * MiB)
    # a VM that reports its host's whole cache: at most 1 GiB a buffer on the CPU
    assert default_sizes("cpu", 480 * MiB) == (960 * MiB, 960 * MiB)
    assert default_sizes("cpu", 4096 * MiB) == (1024 * MiB, 1024 * MiB)
    # CUDA: at least 1 GiB, no cap (an H200's 60 MiB L2 gives the minimum)
    assert default_sizes("cuda", 60 * MiB) == (1024 * MiB, 120 * MiB)
    assert default_sizes("cuda:1", 1024 * MiB) == (2048 * MiB, 2048 * MiB)
