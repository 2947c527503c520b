"""Implementation tests of an invariant: the look-back's workspace under CUDA-graph capture
(runtime.workspace._captured_workspace) is shared by the calls of one capture and stream, and
never handed to two captures. Its logic is checked without a GPU, the capture's id and the
stream stood in for; the public behaviour (graphs that capture and replay look-back calls, with
the right numbers) is tested by the GPU suite (tests/test_gpu.py)."""
import pytest
import torch

import scangen
from conftest import DEVICE
from scangen import runtime
from scangen.runtime import config
from scangen.testing import make_inputs


@pytest.fixture
def plan(monkeypatch):
    """A look-back plan of GAE (one call made), and a way to set the capture in progress."""
    rule = config.override(lambda c: config.Config(1, 64, 1, 4, "lookback"))
    rule.__enter__()
    x = make_inputs("compute_gae", 2, 300, seed=0)
    scangen.compute_gae(**{k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()},
                        backend="triton")
    (p,) = runtime.PLANS.values()
    assert p.config.family == "lookback"
    capture = {"id": None}
    monkeypatch.setattr(runtime.workspace, "_capture_id", lambda stream: capture["id"])
    monkeypatch.setattr(runtime.workspace, "_HELD", [0])
    yield p, capture
    rule.__exit__(None, None, None)


def _take(p, stream):
    return runtime.workspace._captured_workspace(p, p.config, p.lp.lb_words, stream)


def test_calls_of_one_capture_and_stream_share_a_workspace(plan):
    p, capture = plan
    capture["id"] = 7
    a = _take(p, stream=1)
    assert _take(p, stream=1) is a
    b = _take(p, stream=2)  # another stream of the same capture: calls may run at once
    assert b is not a
    capture["id"] = 8  # the next capture never gets an earlier capture's workspace
    c = _take(p, stream=1)
    assert c is not a and c is not b
    for ws in (a, b):
        assert (ws == -1).all(), "made all-one bits (inside the graph, on a GPU)"


def test_a_ready_spare_goes_to_one_capture_and_is_kept(plan):
    p, capture = plan
    spare = runtime.workspace._new_workspace(p, p.config, p.lp.lb_words)
    p.lp.spare = (spare, None)
    capture["id"] = 1
    assert _take(p, stream=1) is not spare, "a spare whose fill is not seen complete stays"
    capture["id"] = 2
    p.lp.spare_ready = True
    assert _take(p, stream=1) is spare
    assert _take(p, stream=1) is spare
    assert p.lp.spare is None and not p.lp.spare_ready
    assert runtime.workspace._HELD[1:] == [spare] and runtime.workspace._HELD[0] == spare.numel() * 4
    assert _take(p, stream=2) is not spare
    capture["id"] = 3
    assert _take(p, stream=1) is not spare


def test_without_the_capture_id_every_call_fills_its_own(plan):
    p, capture = plan
    p.lp.spare = (runtime.workspace._new_workspace(p, p.config, p.lp.lb_words), None)
    p.lp.spare_ready = True
    a, b = _take(p, stream=1), _take(p, stream=1)
    assert a is not b and p.lp.spare is not None


def test_capture_id_is_none_outside_a_capture():
    """The driver's capture id (or its absence on a machine without a CUDA driver) reads None
    for a stream that is not capturing: the legacy default stream here."""
    assert runtime.workspace._capture_id(0) is None
