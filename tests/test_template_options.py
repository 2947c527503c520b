"""Template options kept for side-by-side measurement (scangen.compiler.options.Options, used by
bench/dev/sweep.py --variants) generate kernels that match the float64 references too.

Each variant is compiled from a built-in spec under a new name, then run through the Triton
backend (interpreted on CPU) with chunks of 16 steps, so that every chunk edge, where a shifted
read crosses into the neighbouring chunk, is exercised, in both kernel families."""
import contextlib
import inspect
import os
from unittest import mock

import pytest
import torch

import scangen
from conftest import DEVICE
from scangen import abi, runtime
from scangen.compiler.options import Options
from scangen.compiler.pipeline import generate, generate_modules
from scangen.runtime import config, launch_params
from scangen.testing import reference
from scangen.compiler.store import spec_dir
from scangen.testing import as_time_major, assert_close, compile_variant, make_inputs

VARIANTS = [("shift", "gather"), ("input_shift", "gather"), ("input_shift", "load")]
ALGOS = ["gae", "vtrace", "masked_gae", "episodic_prefix_sum", "eligibility_traces", "retrace"]


# The tiles a chunk's scan takes (scangen.kernels.common.scan_tiles) for a joint pair of scans
# (five map words) and for a scan with its exclusive map (chain="sequential", shifted states)
JOINT_MAPS = "_scan_tiles((_jp, _jq, _jr, _ju, _jv),"
EXCL_MAPS = "_scan_tiles((_alpha, _beta, _zero, _zero + 1.0),"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("variants")


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _triton_source(name, options=None) -> str:
    """The generated Triton kernels (the ``_triton`` companion) of the built-in ``name``."""
    return generate_modules(spec_dir() / f"{name}.yaml", options=options)[1][abi.TRITON_SUFFIX]


def _kernels(fn):
    """The Triton kernels of a compiled op's function (its ``_triton`` companion, loaded now)."""
    return abi.triton_kernels(fn.__globals__["OP"])


def _kernel_source(fn) -> str:
    return inspect.getsource(inspect.getmodule(_kernels(fn).stream.fn))


def _check(fn, name, rows, seed, label, *patches, family=None, chunk=16, T=50):
    """``fn`` through the Triton backend (interpreted on CPU) with ``patches`` applied, chunks of
    ``chunk`` steps and ``T`` steps, against the float64 reference of the built-in ``name``."""
    inputs = make_inputs(name, rows, T, seed=seed)
    expected = _tuple(reference.REFERENCES[f"compute_{name}"](**inputs))
    dev = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in inputs.items()}
    env = {"SCANGEN_FAMILY": family} if family else {}
    with contextlib.ExitStack() as stack:
        for p in (mock.patch.object(config, "MAX_BLOCK_T", chunk),
                  mock.patch.object(config, "LOOKBACK_BLOCK_T", chunk),
                  mock.patch.dict(os.environ, env), *patches):
            stack.enter_context(p)
        runtime.reload_env()
        runtime.PLANS.clear()
        try:
            got = _tuple(fn(**dev, backend="triton"))
        finally:
            runtime.PLANS.clear()
    runtime.reload_env()
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e, dtype=g.dtype, name=f"{name} {label}")


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("option,value", VARIANTS)
@pytest.mark.parametrize("name", ALGOS)
def test_variant_matches_reference(name, option, value, family, cache):
    _check(compile_variant(name, cache, **{option: value}), name, 3, 21,
           f"{option}={value} {family}", family=family)


@pytest.mark.parametrize("group", [2, 4, 16])
@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("name", ["gae", "vtrace", "retrace", "episodic_prefix_sum",
                                  "eligibility_traces"])
def test_register_shift_groups(name, family, group):
    """The default input_shift="split" takes x[t + 1] / x[t - 1] from the aligned tile, SHIFT_G
    steps per thread. On CPU runtime.launch.shift_group picks 1 (the plain shifted load), so the
    register path is forced here for every group size a GPU layout gives, with 16-step chunks
    and T = 50: groups end at chunk edges and at the window end, where the shifted step is
    clamped as the torch path clamps it."""
    _check(getattr(scangen, f"compute_{name}"), name, 3, 5, f"SHIFT_G={group} {family}",
           mock.patch.object(runtime.launch, "shift_group", lambda c, cfg: group), family=family)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
def test_retrace_in_either_step_order(family, group, grouped):
    """Retrace's kernels take their chunks' step order from the launch (the GROUPED constexpr,
    runtime.launch_params.grouped_order): the chunk's steps in reverse, scanned forward (the default),
    or in order, scanned in reverse, give the reference's answer in every family, with 16-step
    chunks and T = 50 (four chunks a row, the last partial: the carry crosses chunks, through
    the look-back in that family); a grouped launch takes the plain shifted loads (SHIFT_G = 1)
    whatever the layout would give."""
    seen = []
    real = runtime.launch.launch

    def spy(c, kernel, grid, args, meta, cfg):
        seen.append((cfg.family, cfg.block_t, meta.get("GROUPED"), meta.get("SHIFT_G")))
        return real(c, kernel, grid, args, meta, cfg)

    cfg = config.Config(1 if family == "lookback" else 2, 16, 4, 4, family)  # K = 4 actions
    _check(scangen.compute_retrace, "retrace", 3, 7,
           f"GROUPED={grouped} {family} SHIFT_G={group}",
           config.override(lambda c: cfg),
           mock.patch.object(launch_params, "GROUPED_ORDER", grouped),
           mock.patch.object(runtime.launch, "shift_group", lambda c, cfg: group),
           mock.patch.object(runtime.launch, "launch", spy))
    want = (family, 16, True, 1) if grouped else (family, 16, False, group)
    assert seen and all(s == want for s in seen), seen


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("name", ["gae", "vtrace", "retrace", "masked_gae", "episodic_prefix_sum",
                                  "eligibility_traces", "discounted_returns"])
def test_persist_strides_over_tiles(name, group):
    """The persist family: three persistent programs (on CPU) stride over 2-row tiles of 9
    rows, each streaming 4 chunks of 16 steps; the carry restarts at every tile's first chunk
    and the next item's tiles are loaded before the current one is scanned."""
    kk = 8 if name == "retrace" else 1  # make_inputs' action count: one tile element per action
    _check(getattr(scangen, f"compute_{name}"), name, 9, 8, f"persist SHIFT_G={group}",
           config.override(lambda c: config.Config(2, 16, kk, 4, "persist")),
           mock.patch.object(runtime.launch, "shift_group", lambda c, cfg: group))


@pytest.mark.parametrize("family", ["stream", "persist"])
@pytest.mark.parametrize("name", ["gae", "vtrace", "masked_gae", "eligibility_traces"])
def test_time_major_buffers_in_partial_row_tiles(name, family):
    """Time-major buffers through the stream and persist kernels: 9 rows in tiles of 4 (the
    last one partial), chunks of 16 steps, T = 50, against the float64 reference."""
    inputs = make_inputs(name, 9, 50, seed=4)
    expected = _tuple(reference.REFERENCES[f"compute_{name}"](**inputs))
    tm = as_time_major({k: v.to(DEVICE) if torch.is_tensor(v) else v
                        for k, v in inputs.items()})
    runtime.PLANS.clear()
    try:
        with config.override(lambda c: config.Config(4, 16, 1, 4, family, 3)):
            got = _tuple(getattr(scangen, f"compute_{name}")(**tm, backend="triton"))
    finally:
        runtime.PLANS.clear()
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e, dtype=g.dtype, name=f"{name} {family} time-major")


@pytest.mark.parametrize("chain", ["joint", "sequential"])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
def test_masked_gae_chained_scans(family, group, chain, cache):
    """chain="joint" (the default): masked GAE's two scans (the advantage reads the next valid
    value) as one scan of 2x2 triangular maps, and one look-back over five-word aggregates;
    chain="sequential": the first scan with its exclusive map, then the second. Chunks of 16
    steps, T = 50, against the float64 reference."""
    fn = compile_variant("masked_gae", cache, chain=chain)
    source = _kernel_source(fn)
    # the maps a chunk scans (scangen.kernels.common.scan_tiles: their count picks the combine)
    assert (JOINT_MAPS in source) == (chain == "joint")
    assert (EXCL_MAPS in source) == (chain == "sequential")
    _check(fn, "masked_gae", 3, 23, f"chain={chain} {family} SHIFT_G={group}",
           mock.patch.object(runtime.launch, "shift_group", lambda c, cfg: group), family=family)


FORWARD_CHAIN = """
name: fwd_chain
direction: forward
inputs:
  x: {kind: float}
  d: {kind: flag}
scans:
  S1: {update: "x + (1 - d) * 0.9 * S1"}
  S2: {update: "0.5 * prev(S1, 0.25) + x * x - (1 - d) * 0.8 * S2", init: "1.5"}
outputs:
  y: "S2 + S1"
"""


@pytest.mark.parametrize("family", ["stream", "persist"])
def test_forward_chained_scans_jointly(family, cache):
    """A forward pair: the second scan reads prev(first) (fill 0.25 at t = 0): jointly scanned
    with chunks of 16 steps and 2-row tiles over 5 rows, against the float64 IR loop."""
    import ir_eval
    from scangen.compiler.pipeline import plan, to_ir

    ir = to_ir(FORWARD_CHAIN)
    assert [(j.first, j.second) for j in plan(ir).joints] == [("S1", "S2")]
    from scangen.compiler.store import compile_spec
    fn = compile_spec(FORWARD_CHAIN, cache, Options(chain="joint"))
    assert JOINT_MAPS in _kernel_source(fn)
    g = torch.Generator().manual_seed(9)
    x = {"x": torch.rand(5, 50, generator=g) * 2 - 1, "d": torch.rand(5, 50, generator=g) < 0.2}
    expected = ir_eval.evaluate(ir, x)["y"]
    runtime.PLANS.clear()
    try:
        with config.override(lambda c: config.Config(2, 16, 1, 4, family)):
            got = fn(**{k: v.to(DEVICE) for k, v in x.items()}, backend="triton")
    finally:
        runtime.PLANS.clear()
    assert_close(got.cpu(), torch.from_numpy(expected), dtype=got.dtype, name=f"fwd {family}")


def test_joint_pairs_only_where_the_shifted_state_is_read_once():
    """plan.JointPlan is offered for masked GAE (nv then A), and not when an output also reads
    the first scan's shifted state, nor for single-scan specs."""
    from scangen.compiler.pipeline import plan, to_ir

    assert [(j.first, j.second) for j in plan(to_ir(spec_dir() / "masked_gae.yaml")).joints] == \
        [("nv", "A")]
    assert plan(to_ir(spec_dir() / "gae.yaml")).joints == ()
    both = FORWARD_CHAIN.replace('y: "S2 + S1"', 'y: "S2 + prev(S1, 0)"')
    assert plan(to_ir(both)).joints == ()


@pytest.mark.parametrize("options,message", [
    ({"input_shift": "splt"}, r"Options.input_shift = 'splt': expected one of split, load"),
    ({"shift": "gathr"}, r"Options.shift = 'gathr': expected one of scan, gather"),
    ({"unroll": "on"}, r"unknown template option 'unroll' \(options: shift, input_shift"),
])
def test_misspelt_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        generate(spec_dir() / "gae.yaml", options=Options.of(options))


def test_gather_loads_leave_out_the_persist_kernel(cache):
    """input_shift="gather" has no persist kernel; the persist family runs the stream kernel
    (checked against the reference by test_variant_matches_reference)."""
    gathered = _kernels(compile_variant("gae", cache, input_shift="gather"))
    names = set(inspect.getmodule(gathered.stream.fn).__dict__)
    assert any(n.endswith("_chunked_kernel") for n in names)
    assert gathered.persist is None and not any(n.endswith("_persist_kernel") for n in names)
    assert _kernels(compile_variant("gae", cache, input_shift="load")).persist is not None


def test_shift_group_follows_the_layout():
    """One 16-byte vector of the narrowest [N, T] tensor per thread, capped by the tile."""
    from types import SimpleNamespace as NS
    f32 = torch.zeros(4, 1024)
    flag = torch.zeros(4, 1024, dtype=torch.bool)
    c = NS(tensors={"x": f32, "d": flag}, strides={"x": (1024, 0, 1), "d": (1024, 0, 1)},
           outs={"y": f32}, out_strides={"y": (1024, 0, 1)})
    cfg = config.Config(1, 1024, 1, 4)
    assert runtime.launch.shift_group(c, cfg) == 8  # 1024 steps over 128 threads
    assert runtime.launch.shift_group(c, config.Config(2, 1024, 1, 4)) == 16  # the int8 vector
    c.tensors, c.strides = {"x": f32}, {"x": (1024, 0, 1)}
    assert runtime.launch.shift_group(c, cfg) == 4  # the fp32 vector
    c.strides = {"x": (1, 0, 4)}  # time-major: no vector along time
    assert runtime.launch.shift_group(c, cfg) == 1
    c.strides = {"x": (1000, 0, 1)}  # rows not 16-aligned: Triton cannot vectorise
    assert runtime.launch.shift_group(c, cfg) == 1
    c.strides = {"x": (1024, 0, 1)}
    c.tensors = {"x": f32[:, 1:]}  # a pointer off 16-byte alignment
    assert runtime.launch.shift_group(c, cfg) == 1


def test_variant_source_differs():
    """The options change the generated kernels where they apply (not silently ignored)."""
    default = _triton_source("gae")
    gathered = _triton_source("gae", Options(input_shift="gather"))
    assert "tl.gather(values, _idx_next, 1)" in gathered and "tl.gather(values" not in default
    assert "_shift_tile(" in default and "_shift_tile(" not in gathered
    state = _triton_source("vtrace", Options(shift="gather"))
    assert "tl.gather(A, _idx_next, 1)" in state


GROUPED = ["gae", "vtrace", "masked_gae", "lambda_returns", "discounted_returns"]
SCAN_ORDER_CASES = ([(n, "grouped", g, T) for n in GROUPED
                     for g, T in ((1, 50), (4, 50), (16, 50), (4, 64))]
                    + [(n, "natural", 4, 50) for n in ("gae", "masked_gae")])


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("name,order,group,T", SCAN_ORDER_CASES)
def test_scan_order(name, family, order, group, T, cache):
    """scan_order="grouped" (the default): a chunk's columns hold its steps group by group in
    reverse order (SHIFT_G steps a group), each group reversed again in registers before a
    forward scan. On CPU runtime.launch.shift_group picks 1 (the whole chunk reversed); groups
    of 4 and 16 are forced here, with 16-step chunks, T = 50 (a partial last chunk) and T = 64 (full
    tiles, no masks). scan_order="natural" runs the reverse associative scan."""
    fn = compile_variant(name, cache, scan_order=order)
    source = _kernel_source(fn)
    assert ("FLIP=True, REV=False)" in source) == (order == "grouped")
    assert ("FLIP=False, REV=True)" in source) == (order == "natural")
    _check(fn, name, 3, 7, f"scan_order={order} {family} SHIFT_G={group} T={T}",
           mock.patch.object(runtime.launch, "shift_group", lambda c, cfg: group), family=family, T=T)


def test_trailing_axis_specs_keep_the_natural_order():
    """Retrace ([N, T, K] inputs, one step a thread) runs the reverse associative scan under
    scan_order="grouped" too: grouped measured slower for it (bench/NOTES.md, seventh round).
    Its kernels run in every other test of this file and of test_ops."""
    kernels = _triton_source("retrace")
    # the launch's GROUPED order reverses the columns instead (launch_params.grouped_order)
    assert "FLIP=True" not in kernels and "FLIP=False, REV=not GROUPED)" in kernels


@pytest.mark.parametrize("option", [{"shift": "gather"}, {"input_shift": "gather"}])
def test_gathers_scan_in_natural_order(option):
    """The gather options index natural columns: with either, the reverse scans run in natural
    order whatever scan_order says; without them the default is grouped."""
    default = _triton_source("gae")
    gathered = _triton_source("gae", Options(**option))
    assert "FLIP=True, REV=False)" in default and "REV=True" not in default
    assert "FLIP=True" not in gathered and "FLIP=False, REV=True)" in gathered


@pytest.mark.parametrize("warps,steps", [(2, 16), (2, 32), (4, 16), (4, 32)])
@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("name,options", [
    ("gae", {}), ("gae", {"scan_order": "natural"}), ("gae", {"input_shift": "gather"}),
    ("eligibility_traces", {}), ("masked_gae", {}), ("masked_gae", {"chain": "sequential"}),
    ("vtrace", {}), ("discounted_returns", {"scan_order": "natural"}), ("retrace", {})])
def test_lane_tiles_in_runs_of_steps(name, options, family, warps, steps, cache, rows=32):
    """Time-major lane tiles of 32 rows whose warps split the steps (runtime.launch.lane_warps):
    each warp scans a run of consecutive steps and the runs join once a chunk (the template's
    warp_run_scan), forward, reverse over reversed columns (the default scan order), reverse in
    natural order, chained and joint scans, and Retrace's launch-chosen order (one action, so
    that its tiles take lanes); with column gathers (input_shift="gather") the columns keep their
    order. 40 rows (a partial second tile), T = 50: chunks of 16 or 32 steps, the last partial,
    against the float64 reference (the look-back's lanes forced where the rule would decline a
    thread's loads)."""
    fn = compile_variant(name, cache, **options) if options else getattr(scangen, f"compute_{name}")
    inputs = make_inputs(name, 40, 50, seed=steps + warps, A=1)
    expected = _tuple(reference.REFERENCES[f"compute_{name}"](**inputs))
    tm = as_time_major({k: v.to(DEVICE) if torch.is_tensor(v) else v
                        for k, v in inputs.items()})
    seen = []
    real = runtime.launch.launch

    def spy(c, kernel, grid, args, meta, cfg):
        seen.append((meta["LANES"] > 0, meta["LANE_WARPS"]))
        return real(c, kernel, grid, args, meta, cfg)

    runtime.PLANS.clear()
    try:
        with config.override(lambda c: config.Config(rows, steps, 1, warps, family, 3)), \
                mock.patch.object(runtime.timemajor, "lookback_lanes", lambda c, cfg: True), \
                mock.patch.object(runtime.launch, "launch", spy):
            got = _tuple(fn(**tm, backend="triton"))
    finally:
        runtime.PLANS.clear()
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e, dtype=g.dtype, name=f"{name} {options} {family} {warps} warps")
    runs = warps * max(1, 32 // rows)  # tiles of fewer than 32 rows: lanes on the steps too
    assert seen and all(s == (True, runs) for s in seen), seen
    gathers = options.get("input_shift") == "gather"
    assert ("_lane_positions(BLOCK_T, LANE_WARPS)" in _kernel_source(fn)) is not gathers


@pytest.mark.parametrize("warps,steps", [(2, 16), (4, 32), (8, 32)])
@pytest.mark.parametrize("family", ["stream", "persist", "lookback"])
@pytest.mark.parametrize("name", ["gae", "eligibility_traces", "vtrace", "masked_gae"])
def test_lane_tiles_of_sixteen_rows(name, family, warps, steps, cache, monkeypatch):
    """Lane tiles of 16 rows (runtime.launch.LANES_MIN_ROWS): two lanes a row, whose halves of
    the steps are runs like the warps' (runtime.launch.lane_warps: 2 x warps runs), forward,
    reverse and joint scans, against the float64 reference; forced on chunks of 16 and 32 steps
    (LANES_NARROW_MIN_STEPS), so that a row of 50 steps spans several chunks; on 8 warps as the
    look-back's long tiles (timemajor.TM_LB_LONG_LANE_ROWS), 16 runs of 2 steps."""
    assert runtime.launch.LANES_MIN_ROWS == 16
    monkeypatch.setattr(runtime.launch, "LANES_NARROW_MIN_STEPS", 16)
    test_lane_tiles_in_runs_of_steps(name, {}, family, warps, steps, cache, rows=16)


@pytest.mark.parametrize("name", ["eligibility_traces", "discounted_returns", "gae"])
def test_look_back_lane_tiles_on_eight_warps(name, cache):
    """The look-back's lane tiles on eight warps (timemajor.TM_LB_LONG_LANE_WARPS: the long tiles
    of eligibility traces, episodic sums and discounted returns): eight runs of two steps a chunk
    of 16, four chunks a row, against the float64 reference (32 rows on 8 warps take lanes:
    runtime.launch.LANES_ROWS_A_WARP = 4)."""
    assert runtime.launch.LANES_ROWS_A_WARP * 8 <= 32
    test_lane_tiles_in_runs_of_steps(name, {}, "lookback", 8, 16, cache)
