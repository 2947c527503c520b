"""Every generated kernel compiles for the H100/H200 (sm_90) on this machine, GPU or not.

The interpreter runs kernels in numpy and lets through what the compiler refuses (a variable
whose type changes between branches or loop iterations, say); this compiles each generated
kernel, both families, through Triton's frontend, its NVIDIA passes and the bundled ptxas,
with launch configurations the dispatch rule produces. The compilation runs in one child
process without TRITON_INTERPRET (which conftest sets on CPU-only machines).
"""
import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scangen.generated

ROOT = Path(__file__).resolve().parent.parent
# the op modules (compile_offline takes their kernels from the _triton companions); not the
# CPU kernels
MODULES = sorted(m.name for m in pkgutil.iter_modules(scangen.generated.__path__)
                 if not m.name.endswith(("_numba", "_triton")))
CASES = {  # name: (family, block_n, block_t, num_warps, fp64 and absent inputs and any strides,
    #               variant: "" tickets from the counter, "pid" LB_PID, "lean" the lean kernel)
    "stream-short": ("stream", 64, 32, 4, False, ""),
    "stream-long": ("stream", 1, 1024, 4, False, ""),
    "lookback": ("lookback", 1, 1024, 4, False, ""),
    "lookback-pid": ("lookback", 1, 1024, 4, False, "pid"),
    "persist-long": ("persist", 1, 1024, 4, False, ""),
    "persist-fp64-general": ("persist", 2, 256, 4, True, ""),
    "stream-fp64-general": ("stream", 4, 256, 4, True, ""),
    "lookback-fp64-general": ("lookback", 1, 1024, 4, True, ""),
    # the lean entry kernels (scangen.abi.lean_args), which call the full ones
    "stream-lean": ("stream", 64, 32, 4, False, "lean"),
    "persist-lean": ("persist", 1, 1024, 4, False, "lean"),
    "lookback-lean": ("lookback", 1, 1024, 4, False, "lean"),
    # the look-back over tiles of rows (time-major buffers: runtime.config TM_LB_ROWS)
    "lookback-rows": ("lookback", 16, 64, 4, False, ""),
    "lookback-rows-fp64-general": ("lookback", 16, 64, 4, True, ""),
}
# Kernels that take the GROUPED step order (runtime.launch_params.grouped_order: Retrace) compile in
# the reversed order too, each family and the lean entries
ORDER_CASES = {
    "stream-grouped": ("stream", 64, 32, 4, False, "grouped"),
    "stream-long-grouped": ("stream", 1, 1024, 4, False, "grouped"),
    "lookback-grouped": ("lookback", 1, 1024, 4, False, "grouped"),
    "persist-grouped": ("persist", 1, 1024, 4, False, "grouped"),
    "stream-fp64-general-grouped": ("stream", 4, 256, 4, True, "grouped"),
    "stream-lean-grouped": ("stream", 64, 32, 4, False, "lean-grouped"),
}
ORDER_MODULES = [m for m in MODULES
                   if importlib.import_module(f"scangen.generated.{m}").OP.kernels.grouped]

CHILD = r"""
import importlib, json, sys, traceback
import triton
from scangen.testing import compile_case
modules, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"triton": triton.__version__}
for name in modules:
    module = importlib.import_module("scangen.generated." + name)
    for case, (family, bn, bt, nw, general, lb) in cases.items():
        if case.endswith("grouped") and not module.OP.kernels.grouped:
            continue
        try:
            c = compile_case(module, family, block_n=bn, block_t=bt, general=general,
                             num_warps=nw, lb_pid=lb == "pid", lean=lb.startswith("lean"),
                             grouped=lb.endswith("grouped"))
            out[name + "/" + case] = "ok" if c.asm.get("cubin") else "no cubin"
        except Exception as exc:
            out[name + "/" + case] = "".join(traceback.format_exception_only(exc))[-2000:]
print("RESULTS " + json.dumps(out))
"""


def _child(code: str, *args: str, timeout: int, triton_dir: str = ""):
    """Run ``code`` in a fresh Python without TRITON_INTERPRET (so Triton compiles for real) and
    return the JSON it prints after ``RESULTS``; ``triton_dir``: a folder holding another Triton
    (``pip install --target``), imported in place of the installed one."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [triton_dir, str(ROOT),
                                                      env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULTS ")), None)
    if line is None and "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("this Triton install has no bundled ptxas")
    assert line is not None, proc.stderr[-4000:]
    return json.loads(line[len("RESULTS "):])


@pytest.fixture(scope="module")
def results():
    return _child(CHILD, json.dumps(MODULES), json.dumps({**CASES, **ORDER_CASES}),
                  timeout=1200)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", MODULES)
def test_kernel_compiles_for_sm90(results, name, case):
    assert results[f"{name}/{case}"] == "ok", results[f"{name}/{case}"]


def test_retrace_takes_the_launch_step_order():
    """Retrace's kernels take the GROUPED constexpr, so the cases below are not empty."""
    assert "retrace" in ORDER_MODULES


@pytest.mark.parametrize("case", sorted(ORDER_CASES))
@pytest.mark.parametrize("name", ORDER_MODULES)
def test_launch_step_order_kernel_compiles_for_sm90(results, name, case):
    assert results[f"{name}/{case}"] == "ok", results[f"{name}/{case}"]


TIME_MAJOR = r"""
import json, re
from scangen.generated import gae
from scangen.testing import compile_offline
out = {}
for key, family, bn, bt, nw, mx in (("plain", "stream", 64, 32, 4, 0),
                                   ("lookback", "lookback", 16, 64, 4, 0),
                                   ("maxnreg", "stream", 64, 32, 4, 96)):
    ptx = compile_offline(gae, family, block_n=bn, block_t=bt, num_warps=nw,
                          time_major=True, maxnreg=mx).asm["ptx"]
    out[key] = {"v4": len(re.findall(r"ld\.global[.\w]*\.v4", ptx)),
                "v2": len(re.findall(r"ld\.global[.\w]*\.v2", ptx)),
                "shared": len(re.findall(r"ld\.shared", ptx)),
                "maxnreg": re.findall(r"\.maxnreg\s+(\d+)", ptx)}
print("RESULTS " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def time_major():
    return _child(TIME_MAJOR, timeout=600)


def test_time_major_loads_are_coalesced_along_rows(time_major):
    """Compiled as Triton specialises a time-major launch (rows adjacent, R2 == 1), the [N, T]
    tiles load 16-byte vectors along rows: the kernel's row indices keep their contiguity
    through the canonical (R1, R2) split (bench/NOTES.md, fourth round, item 10)."""
    got = time_major
    assert got["plain"]["v4"] >= 6, got  # the six [N, T] tiles of GAE with truncations
    assert got["lookback"]["v4"] >= 6, got  # and so in the look-back over tiles of 16 rows


def test_maxnreg_caps_the_registers_a_thread(time_major):
    """compile_offline(maxnreg=...) (runtime.launch.MAXNREG, for A/B runs) reaches ptxas as the
    kernel's .maxnreg directive; without it ptxas decides."""
    assert time_major["maxnreg"]["maxnreg"] == ["96"], time_major
    assert time_major["plain"]["maxnreg"] == [], time_major


SEQUENTIAL = r"""
import json, sys, tempfile, traceback
from pathlib import Path
from scangen.testing import compile_case, compile_variant
fn = compile_variant("masked_gae", Path(tempfile.mkdtemp()), chain="sequential")
module = sys.modules[fn.__module__]
out = {}
for case, (family, bn, bt, nw, general, lb) in json.loads(sys.argv[1]).items():
    try:
        c = compile_case(module, family, block_n=bn, block_t=bt, general=general,
                         num_warps=nw, lb_pid=lb == "pid")
        out[case] = "ok" if c.asm.get("cubin") else "no cubin"
    except Exception as exc:
        out[case] = "".join(traceback.format_exception_only(exc))[-2000:]
print("RESULTS " + json.dumps(out))
"""
SEQUENTIAL_CASES = {k: CASES[k] for k in ("stream-long", "persist-long", "lookback",
                                          "lookback-pid", "lookback-fp64-general",
                                          "lookback-rows")}


@pytest.fixture(scope="module")
def sequential_results():
    return _child(SEQUENTIAL, json.dumps(SEQUENTIAL_CASES), timeout=900)


@pytest.mark.parametrize("case", sorted(SEQUENTIAL_CASES))
def test_sequential_chain_kernels_compile_for_sm90(sequential_results, case):
    """masked GAE rendered with chain="sequential" (its first scan with its exclusive map, then
    the second; two look-backs) compiles for sm_90 in every family. The default, chain="joint",
    is the generated module the tests above compile."""
    assert sequential_results[case] == "ok", sequential_results[case]


GROUPED = r"""
import json, sys, tempfile
from pathlib import Path
from scangen.testing import compile_offline, compile_variant
import scangen.generated.gae as grouped
import scangen.generated.masked_gae as grouped_masked
cache = Path(tempfile.mkdtemp())
out = {}
for name, default in (("gae", grouped), ("masked_gae", grouped_masked)):
    natural = sys.modules[compile_variant(name, cache, scan_order="natural").__module__]
    for case, (family, bn, bt, nw, general, lb) in json.loads(sys.argv[1]).items():
        counts = []
        for module in (natural, default):
            c = compile_offline(module, family, block_n=bn, block_t=bt, num_warps=nw)
            counts.append(c.asm["ptx"].count("shfl.sync") if c.asm.get("cubin") else -1)
        out[name + "/" + case] = counts
print("RESULTS " + json.dumps(out))
"""
GROUPED_CASES = {k: CASES[k] for k in ("stream-short", "stream-long", "persist-long", "lookback")}


@pytest.fixture(scope="module")
def grouped_results():
    return _child(GROUPED, json.dumps(GROUPED_CASES), timeout=900)


@pytest.mark.parametrize("name", ["gae", "masked_gae"])
@pytest.mark.parametrize("case", sorted(GROUPED_CASES))
def test_grouped_scan_order_compiles_with_fewer_shuffles(grouped_results, name, case):
    """scan_order="grouped" (render.OPTIONS, the default) compiles for sm_90 in every family,
    and its forward scan over the chunk's steps, regrouped in registers, shuffles less than the
    reverse scan, which reverses lanes (bench/NOTES.md, sixth round, item 4)."""
    natural, grouped = grouped_results[f"{name}/{case}"]
    assert grouped >= 0 and natural >= 0, (natural, grouped)
    assert grouped < natural, (natural, grouped)


ONE_CHUNK = r"""
import json, sys
from scangen.testing import compile_offline
import scangen.generated.gae as gae
import scangen.generated.eligibility_traces as traces
out = {}
for name, module in (("gae", gae), ("eligibility_traces", traces)):
    for family in ("stream", "persist"):
        counts = []
        for one in (False, True):
            c = compile_offline(module, family, block_n=1, block_t=1024, num_warps=8,
                                present=False, lean=True, one_chunk=one)
            ptx = c.asm["ptx"] if c.asm.get("cubin") else ""
            counts.append([ptx.count("bar.sync"), ptx.count("shfl.sync"), len(ptx.splitlines())])
        out[name + "/" + family] = counts
print("RESULTS " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def one_chunk_results():
    return _child(ONE_CHUNK, timeout=900)


@pytest.mark.parametrize("family", ["stream", "persist"])
@pytest.mark.parametrize("name", ["gae", "eligibility_traces"])
def test_one_chunk_compiles_without_the_carry_between_chunks(one_chunk_results, name, family):
    """ONE_CHUNK (runtime.launch.one_chunk: T <= BLOCK_T) compiles for sm_90, and a one-chunk
    row's kernel has no carry extraction between chunks: fewer barriers and shuffles, shorter
    PTX (bench/NOTES.md, fourteenth round)."""
    off, on = one_chunk_results[f"{name}/{family}"]
    assert on[2] > 0 and off[2] > 0, (off, on)
    assert on[0] < off[0] and on[1] < off[1] and on[2] < off[2], (off, on)


# A float64 kernel computes in float64 with the spec's numbers as doubles: Triton's typing of
# Python numbers rounds some to float32 before float64 arithmetic sees them (a select of two
# numbers, tl.exp(2.0), and in Triton 3.6 a number given to tl.maximum), and the compiled IR
# shows it: a float32 constant that is not the number it stands for, or a float64 constant that
# is a float32's value (0.10000000149011612 for 0.1). scangen.compiler.printers writes such numbers
# in ACC; this checks the IR of the forward and adjoint kernels of a spec that has each kind.
F64_SPEC = """\
name: f64_ir
direction: reverse
inputs:
  x: float
  f: flag
params:
  p: {default: 0.8}
scans:
  S:
    update: x * p + 0.3 * abs(x) + 0.7 * max(x, 0.1) + min(x, -0.9) + where(f, where(x > 0.2, 1, 0.5), 0.3) + 0.1 * exp(2) * log(3) + sqrt(2) * x + where(is_last, 0, -0.9) * p * (1 - f) * S
outputs:
  y: S
"""

F64_IR = r"""
import importlib, json, re, sys, tempfile
import triton.language as tl
import scangen
from scangen.runtime import ops
from scangen.testing import compile_offline
fn = scangen.compile(sys.argv[1], cache_dir=tempfile.mkdtemp())
module = importlib.import_module(fn.__module__)
grad = importlib.import_module(ops.grad_op_of(module.OP).module)
out = {}
for name, m in (("forward", module), ("adjoint", grad)):
    for family in ("stream", "persist", "lookback"):
        c = compile_offline(m, family, acc=tl.float64, block_n=4, block_t=256)
        out[name + "/" + family] = re.findall(
            r"arith\.constant (?:dense<)?([-+0-9.eEinfa]+)>? : (?:tensor<[0-9x]*x)?(f32|f64)",
            c.asm["ttir"])
print("RESULTS " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def f64_constants():
    return _child(F64_IR, F64_SPEC, timeout=900)


def _float32_rounded(text: str, ty: str) -> bool:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        return False
    as32 = float(np.float32(value))
    if ty == "f32":  # a float32 constant that stands for a number float32 cannot hold
        return as32 != value
    # a float64 constant that is exactly a float32 but no short decimal (a rounded number)
    return as32 == value and len(repr(value).lstrip("-")) > 12


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("kernel", ["forward", "adjoint"])
def test_float64_kernels_keep_the_specs_numbers(f64_constants, kernel, family):
    constants = f64_constants[f"{kernel}/{family}"]
    assert any(ty == "f64" for _, ty in constants), constants  # the IR was read
    rounded = [(v, ty) for v, ty in constants if _float32_rounded(v, ty)]
    assert not rounded, rounded


LANE_RUNS = r"""
import importlib, json, sys, tempfile, traceback
from pathlib import Path
from scangen.testing import compile_offline, compile_variant
cache = Path(tempfile.mkdtemp())
out = {}
for name, option in json.loads(sys.argv[1]):
    if option:
        module = sys.modules[compile_variant(name, cache, **dict([option.split("=")])).__module__]
    else:
        module = importlib.import_module("scangen.generated." + name)
    for family, bt, nw in (("stream", 32, 2), ("persist", 32, 4), ("lookback", 64, 4)):
        key = f"{name}[{option}]/{family}"
        try:
            shared = []
            for runs in (None, 1):  # the rule's LANE_WARPS (the warps), then the columns' order
                c = compile_offline(module, family, block_n=32, block_t=bt, num_warps=nw,
                                    time_major=True, lanes=1, lane_warps=runs)
                shared.append(c.asm["ptx"].count("ld.shared") if c.asm.get("cubin") else -1)
            out[key] = shared
        except Exception as exc:
            out[key] = "".join(traceback.format_exception_only(exc))[-2000:]
print("RESULTS " + json.dumps(out))
"""
LANE_RUN_OPS = [(m, "") for m in MODULES if m != "retrace"] + [
    ("masked_gae", "chain=sequential"), ("gae", "scan_order=natural"), ("vtrace", "shift=gather")]


@pytest.fixture(scope="module")
def lane_run_results():
    return _child(LANE_RUNS, json.dumps(LANE_RUN_OPS), timeout=1200)


NARROW_LANES = r"""
import importlib, json, re, sys, traceback
from scangen.testing import compile_offline
out = {}
for name in json.loads(sys.argv[1]):
    module = importlib.import_module("scangen.generated." + name)
    for family, bt, nw in (("stream", 128, 4), ("lookback", 512, 8)):
        key = f"{name}/{family}"
        try:
            c = compile_offline(module, family, block_n=16, block_t=bt, num_warps=nw,
                                time_major=True, lanes=1)
            out[key] = sorted(set(re.findall(r"threadsPerWarp = \[([0-9, ]+)\], "
                                             r"warpsPerCTA = \[([0-9, ]+)\]", c.asm["ttgir"])))
        except Exception as exc:
            out[key] = "".join(traceback.format_exception_only(exc))[-2000:]
print("RESULTS " + json.dumps(out))
"""
NARROW_LANE_OPS = ["eligibility_traces", "discounted_returns", "gae"]


@pytest.fixture(scope="module")
def narrow_lane_results():
    return _child(NARROW_LANES, json.dumps(NARROW_LANE_OPS), timeout=600)


@pytest.mark.parametrize("family,warps", [("stream", 4), ("lookback", 8)])
@pytest.mark.parametrize("name", NARROW_LANE_OPS)
def test_lane_tiles_of_sixteen_rows_hold_runs_in_registers(narrow_lane_results, name, family, warps):
    """Lane tiles of 16 rows (runtime.launch.LANES_MIN_ROWS: the few-program stream tiles, 16 x
    128 on 4 warps, and the look-back's long tiles, 16 x 512 on 8) compile for sm_90, and Triton
    lays them out as runtime.launch.lane_warps counts: 16 lanes on the rows, 2 on the steps, the
    warps on the steps, so that the runs' axis ([16, steps / runs, runs], the template's
    reshape) spreads over 2 lanes x the warps and a lane holds its run in registers."""
    got = narrow_lane_results[f"{name}/{family}"]
    assert isinstance(got, list), got
    layouts = {tuple(tuple(int(x) for x in part.split(",")) for part in pair) for pair in got}
    assert ((16, 2), (1, warps)) in layouts, layouts  # the [BN, BT] tiles' loads
    assert ((16, 1, 2), (1, 1, warps)) in layouts, layouts  # the runs: steps in registers


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("name,option", LANE_RUN_OPS)
def test_lane_tiles_in_runs_of_steps_compile_for_sm90(lane_run_results, name, option, family):
    """Time-major lane tiles of 32 rows whose 2 or 4 warps split the steps compile for sm_90 in
    every family with LANE_WARPS from the rule (runtime.launch.lane_warps: each warp scans a run of
    consecutive steps, the template's warp_run_scan) and with the columns' own order, for every
    built-in without a trailing axis and the template variants (two scans in one kernel, a
    reverse scan in natural order, column gathers); the runs join the warps with fewer
    shared-memory loads than a join at every step (bench/NOTES.md, twenty-seventh round)."""
    got = lane_run_results[f"{name}[{option}]/{family}"]
    assert isinstance(got, list), got
    runs, interleaved = got
    assert runs >= 0 and interleaved >= 0, got
    if option != "shift=gather":  # its column gathers keep the columns' order: one kernel
        assert runs < interleaved, got
    else:
        assert runs == interleaved, got


# The oldest Triton scangen supports (pyproject's lower bound): every built-in's kernels of each
# family compile for sm_90 with it too, checked where SCANGEN_OLDEST_TRITON names a folder holding
# that version (`pip install --no-deps --target DIR triton==<bound>`; .ci/run installs it). Triton
# 3.4 fails here (a RecursionError in its frontend), 3.5 and 3.6 compile every case above.
OLDEST_DIR = os.environ.get("SCANGEN_OLDEST_TRITON", "")
OLDEST_CASES = {k: CASES[k] for k in ("stream-short", "stream-long", "persist-long", "lookback",
                                      "lookback-rows", "stream-lean", "lookback-fp64-general")}
OLDEST_LANE_OPS = [("eligibility_traces", ""), ("masked_gae", "chain=sequential"),
                   ("vtrace", "shift=gather")]


def oldest_triton() -> str:
    """The lower bound of pyproject.toml's ``triton>=X.Y`` requirement."""
    text = (ROOT / "pyproject.toml").read_text()
    bound = re.search(r'"triton>=([0-9.]+)[;"]', text)  # a marker may follow: "triton>=X.Y; ..."
    assert bound, "pyproject.toml names no lower bound for triton"
    return bound.group(1)


def test_ci_installs_the_oldest_supported_triton():
    """.ci/run puts pyproject's lower bound of triton where the tests below look for it."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"triton=={oldest_triton()}" in ci and "SCANGEN_OLDEST_TRITON" in ci


@pytest.fixture(scope="module")
def oldest_results():
    if not OLDEST_DIR:
        pytest.skip("SCANGEN_OLDEST_TRITON is not set (.ci/run sets it)")
    got = _child(CHILD, json.dumps(MODULES), json.dumps(OLDEST_CASES), timeout=1200,
                 triton_dir=OLDEST_DIR)
    lanes = _child(LANE_RUNS, json.dumps(OLDEST_LANE_OPS), timeout=1200, triton_dir=OLDEST_DIR)
    return got, lanes


def test_oldest_triton_is_the_one_compiling(oldest_results):
    got, _ = oldest_results
    bound = oldest_triton().split(".")
    assert got["triton"].split("+")[0].split(".")[:len(bound)] == bound, got["triton"]


@pytest.mark.parametrize("case", sorted(OLDEST_CASES))
@pytest.mark.parametrize("name", MODULES)
def test_kernel_compiles_with_the_oldest_triton(oldest_results, name, case):
    got, _ = oldest_results
    assert got[f"{name}/{case}"] == "ok", got[f"{name}/{case}"]


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("name,option", OLDEST_LANE_OPS)
def test_lane_tiles_compile_with_the_oldest_triton(oldest_results, name, option, family):
    _, lanes = oldest_results
    got = lanes[f"{name}[{option}]/{family}"]
    assert isinstance(got, list) and min(got) >= 0, got


# bench/dev/ptx_digest.py calls a template refactor safe when every kernel's PTX, debug lines
# left out, is the one before: the digest must ignore where the source lines are and must not
# ignore a changed instruction.
DIGEST = r"""
import json, pathlib, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, "bench/dev")
from ptx_digest import normalise
from scangen.abi import load_module
BODY = '''
import triton
import triton.language as tl
{pad}
@triton.jit
def k(x, y, n, B: tl.constexpr):
    o = tl.arange(0, B){pad2}
    v = tl.load(x + o, mask=o < n)
    tl.store(y + o, v {op} 3.0, mask=o < n)
'''
out = {}
tmp = pathlib.Path(tempfile.mkdtemp())
for name, pad, pad2, op in [("base", "", "", "*"), ("moved", "# a comment\n\n\n", "  # here", "*"),
                            ("other", "", "", "+")]:
    path = tmp / f"k_{name}.py"
    path.write_text(BODY.format(pad=pad, pad2=pad2, op=op))
    fn = load_module(f"digest_{name}", path).k
    src = ASTSource(fn=fn, signature={"x": "*fp32", "y": "*fp32", "n": "i32", "B": "constexpr"},
                    constexprs={"B": 128})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    out[name] = [normalise(ptx), ".loc" in ptx]
print("RESULTS " + json.dumps(out))
"""


def test_ptx_digest_ignores_source_lines_not_instructions():
    got = _child(DIGEST, timeout=300)
    (base, loc), (moved, moved_loc), (other, _) = got["base"], got["moved"], got["other"]
    assert loc and moved_loc  # the raw PTX names its source lines, which moved ...
    assert base == moved  # ... and the normalised PTX does not
    assert base != other and "mul.f32" in base and "add.f32" in other
