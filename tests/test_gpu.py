"""GPU-only checks: long rows (beyond one chunk, beyond 2^17, up to 2^22 steps), chunk
boundaries that fall on episode boundaries, both kernel families, and CUDA graph capture.

Large shapes are compared with the generated torch path run in float64 on the GPU, which the
CPU suite checks against the hand-written float64 references at small sizes."""
import pytest
import torch

import scangen
from scangen.testing import reference
from scangen import runtime
from scangen.testing import as_time_major, assert_close, make_inputs

pytestmark = pytest.mark.gpu
ALGOS = sorted(reference.REFERENCES)


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _f64(inputs):
    return {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v)
            for k, v in inputs.items()}


def _compare_with_f64_torch(name, inputs, **kw):
    fn = getattr(scangen, name)
    got = _tuple(fn(**inputs, backend="triton", **kw))
    ref = _tuple(fn(**_f64(inputs), backend="torch", **kw))
    for g, r in zip(got, ref):
        assert_close(g.float().cpu(), r.cpu(), dtype=g.dtype, name=name)


@pytest.fixture
def family(request, monkeypatch):
    if request.param:
        monkeypatch.setenv("SCANGEN_FAMILY", request.param)
    runtime.reload_env()
    yield request.param
    monkeypatch.delenv("SCANGEN_FAMILY", raising=False)
    runtime.reload_env()


@pytest.mark.parametrize("family", [None, "stream", "persist", "lookback"], indirect=True)
@pytest.mark.parametrize("shape", [(3, 1 << 17 | 5), (64, 65536), (1, 1 << 22)],
                         ids=lambda s: f"N{s[0]}-T{s[1]}")
@pytest.mark.parametrize("name", ALGOS)
def test_long_rows(name, shape, family):
    _compare_with_f64_torch(name, make_inputs(name, *shape, seed=1, device="cuda"))


@pytest.mark.parametrize("name", ALGOS)
def test_against_handwritten_reference_on_gpu(name):
    inputs = make_inputs(name, 33, 3000, seed=2)
    expected = _tuple(reference.REFERENCES[name](**inputs))
    dev = {k: v.cuda() if torch.is_tensor(v) else v for k, v in inputs.items()}
    for g, e in zip(_tuple(getattr(scangen, name)(**dev)), expected):
        assert_close(g.cpu(), e, dtype=g.dtype, name=name)


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"], indirect=True)
@pytest.mark.parametrize("block", [512, 1024])
def test_chunk_boundaries_on_episode_boundaries(block, family):
    """Episodes that end exactly at chunk edges (and one step either side)."""
    inputs = make_inputs("gae", 4, 8 * block, seed=3, device="cuda", term_rate=0, trunc_rate=0)
    term = torch.zeros_like(inputs["terminateds"])
    trunc = torch.zeros_like(term)
    for k in range(1, 8):
        term[0, k * block - 1] = True
        trunc[1, k * block - 1] = True
        term[2, k * block] = True
        trunc[3, k * block - 2] = True
    inputs.update(terminateds=term, truncateds=trunc)
    _compare_with_f64_torch("compute_gae", inputs, outputs=("advantages", "returns"))
    _compare_with_f64_torch("compute_vtrace", make_inputs("vtrace", 4, 8 * block, seed=4,
                                                          device="cuda"))


@pytest.mark.parametrize("name", ALGOS)
def test_many_rows_short_t(name):
    for shape in [(32768, 16), (4096, 128), (16384, 7)]:
        _compare_with_f64_torch(name, make_inputs(name, *shape, seed=5, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_on_gpu(dtype):
    inputs = make_inputs("gae", 256, 2048, seed=6, device="cuda", dtype=dtype)
    out = scangen.compute_gae(**inputs)
    assert out.dtype == dtype
    ref = scangen.compute_gae(**_f64(inputs), backend="torch")
    assert_close(out.cpu(), ref.cpu(), dtype=dtype)


@pytest.mark.parametrize("family,shape,time_major", [
    ("stream", (1024, 256), False), ("persist", (300, 2048), False),
    ("lookback", (4, 8192), False), ("lookback", (72, 8192), True)])
def test_cuda_graph_capture_and_replay(family, shape, time_major, monkeypatch):
    """Each kernel family captured in a CUDA graph and replayed twice on new inputs (the
    look-back's workspace: the plan's spare, filled outside the graph, or one filled inside
    it), then called eagerly again on both streams (the look-back's kept workspaces);
    time-major buffers take the look-back over tiles of rows (runtime.timemajor TM_LB_ROWS)."""
    monkeypatch.setenv("SCANGEN_FAMILY", family)
    runtime.reload_env()
    try:
        inputs = make_inputs("gae", *shape, seed=7, device="cuda")
        if time_major:
            inputs = as_time_major(inputs)
            runtime.PLANS.clear()
        static = {k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):  # warm up: compile and plan outside the capture
                scangen.compute_gae(**static)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = scangen.compute_gae(**static)
        for seed in (8, 9):
            fresh = make_inputs("gae", *shape, seed=seed, device="cuda")
            for k, v in fresh.items():
                if torch.is_tensor(v):
                    static[k].copy_(v)
            graph.replay()
            torch.cuda.synchronize()
            expected = reference.compute_gae(**{k: v.cpu() if torch.is_tensor(v) else v
                                                for k, v in fresh.items()})
            assert_close(out.cpu(), expected, dtype=out.dtype, name=f"{family} replay {seed}")
        if time_major:  # tiles of adjacent rows (32 x 256, halved to 16 rows where a grid of
            # 32-row tiles would have fewer programs than SMs: 96 on an H200)
            assert {(p.config.family, p.config.block_n >= 16)
                    for p in runtime.PLANS.values()} == {("lookback", True)}
        for stream in (s, torch.cuda.current_stream()):  # eager calls again, after the replays
            with torch.cuda.stream(stream):
                fresh = make_inputs("gae", *shape, seed=10, device="cuda")
                got = scangen.compute_gae(**(as_time_major(fresh) if time_major else fresh))
            torch.cuda.synchronize()
            expected = reference.compute_gae(**{k: v.cpu() if torch.is_tensor(v) else v
                                                for k, v in fresh.items()})
            assert_close(got.cpu(), expected, dtype=got.dtype, name=f"{family} eager after graph")
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()


def test_lookback_captures_share_no_workspace(monkeypatch):
    """Look-back calls under CUDA-graph capture (runtime.workspace._captured_workspace): the first
    capture after eager calls takes the plan's spare workspace, filled outside the graph; a
    second capture, with no eager call between, fills its own inside the graph; two calls of
    the plan in one capture share one. The two graphs, replayed in turn and then at once on two
    streams, and eager calls after them, all match the reference."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    runtime.reload_env()
    runtime.PLANS.clear()
    try:
        shape = (4, 8192)
        static = [make_inputs("gae", *shape, seed=30 + i, device="cuda") for i in range(3)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm up: compile, plan, and a spare whose fill has completed
                scangen.compute_gae(**static[0])
            torch.cuda.synchronize()
            scangen.compute_gae(**static[0])
        torch.cuda.current_stream().wait_stream(side)
        (plan,) = [p for p in runtime.PLANS.values()
                   if p.config is not None and p.config.family == "lookback"]
        assert plan.lp.spare_ready, "the spare's fill was not seen complete"
        spare = plan.lp.spare[0]
        held = runtime.workspace._HELD[0]
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            out1 = scangen.compute_gae(**static[0])
        assert plan.lp.spare is None and runtime.workspace._HELD[-1] is spare
        assert runtime.workspace._HELD[0] == held + spare.numel() * 4
        with torch.cuda.graph(g2):  # no eager call between: no spare; two calls, one workspace
            out2 = scangen.compute_gae(**static[1])
            out3 = scangen.compute_gae(**static[2])
        (ws,) = plan.lp.captured[1].values()
        assert ws is not spare

        def check(seed):
            fresh = [make_inputs("gae", *shape, seed=seed + i, device="cuda") for i in range(3)]
            for s_, f in zip(static, fresh):
                for k, v in f.items():
                    if torch.is_tensor(v):
                        s_[k].copy_(v)
            return [reference.compute_gae(**{k: v.cpu() if torch.is_tensor(v) else v
                                             for k, v in f.items()}) for f in fresh]

        for seed in (40, 50):  # in turn
            expected = check(seed)
            g1.replay()
            g2.replay()
            torch.cuda.synchronize()
            for got, e in zip((out1, out2, out3), expected):
                assert_close(got.cpu(), e, dtype=got.dtype, name=f"graphs in turn {seed}")
        expected = check(60)
        streams = [torch.cuda.Stream() for _ in range(2)]
        for st in streams:
            st.wait_stream(torch.cuda.current_stream())
        for _ in range(3):  # at once, on two streams: neither graph's workspace is the other's
            with torch.cuda.stream(streams[0]):
                g1.replay()
            with torch.cuda.stream(streams[1]):
                g2.replay()
        torch.cuda.synchronize()
        for got, e in zip((out1, out2, out3), expected):
            assert_close(got.cpu(), e, dtype=got.dtype, name="graphs at once")
        fresh = make_inputs("gae", *shape, seed=70, device="cuda")
        got = scangen.compute_gae(**fresh)  # eager again: the stream's own workspace
        torch.cuda.synchronize()
        expected = reference.compute_gae(**{k: v.cpu() if torch.is_tensor(v) else v
                                            for k, v in fresh.items()})
        assert_close(got.cpu(), expected, dtype=got.dtype, name="eager after graphs")
        assert plan.lp.spare is not None, "an eager call makes the next capture's spare"
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()


def test_lookback_calls_of_one_plan_on_two_streams_at_once(monkeypatch):
    """The look-back keeps one workspace per plan and stream: calls of one plan on two streams,
    in flight together, each get their own ticket counter and words."""
    monkeypatch.setenv("SCANGEN_FAMILY", "lookback")
    runtime.reload_env()
    try:
        streams = [torch.cuda.Stream() for _ in range(2)]
        inputs = [make_inputs("gae", 8, 65536, seed=20 + i, device="cuda") for i in range(4)]
        for st in streams:
            st.wait_stream(torch.cuda.current_stream())
        outs = []
        for i, x in enumerate(inputs):  # alternate streams, no synchronisation in between
            with torch.cuda.stream(streams[i % 2]):
                outs.append(scangen.compute_gae(**x))
        torch.cuda.synchronize()
        for x, got in zip(inputs, outs):
            expected = reference.compute_gae(**{k: v.cpu() if torch.is_tensor(v) else v
                                                for k, v in x.items()})
            assert_close(got.cpu(), expected, dtype=got.dtype, name="two streams")
    finally:
        monkeypatch.delenv("SCANGEN_FAMILY")
        runtime.reload_env()


@pytest.mark.parametrize("family", ["stream", "persist", "lookback"], indirect=True)
@pytest.mark.parametrize("name", ALGOS)
def test_fast_path_results(name, family):
    """From a plan's third call on, calls go straight to the compiled kernel's launcher
    (runtime._fast_path). Each call gets new inputs and a new gamma (where the op has one), and
    its outputs, fresh tensors, match the float64 reference."""
    runtime.PLANS.clear()
    fn = getattr(scangen, name)
    has_gamma = "gamma" in fn.__code__.co_varnames
    plans = []
    for call in range(4):
        x = make_inputs(name, 67, 300, seed=10 + call)
        if has_gamma:
            x["gamma"] = 0.9 + 0.02 * call
        expected = _tuple(reference.REFERENCES[name](**x))
        dev = {k: v.cuda() if torch.is_tensor(v) else v for k, v in x.items()}
        got = _tuple(fn(**dev, outputs=None))
        for g, e in zip(got, expected):
            assert_close(g.cpu(), e, dtype=g.dtype, name=f"{name} call {call}")
        plans = list(runtime.PLANS.values())
    (plan,) = plans
    assert plan.config.family == family
    assert plan.lp.fast is not None, "the plan's calls did not take the fast path"
    runtime.PLANS.clear()
