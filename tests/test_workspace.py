"""The look-back's workspace under CUDA-graph capture (runtime._captured_workspace), its logic
checked without a GPU: the capture's id and the stream are stood in for. The GPU suite
(tests/test_gpu.py) captures and replays real graphs."""
import pytest
import torch

import scangen
from conftest import DEVICE
from scangen import config, runtime
from scangen.testing import make_inputs


@pytest.fixture
def plan(monkeypatch):
    """A look-back plan of GAE (one call made), and a way to set the capture in progress."""
    runtime._PLANS.clear()
    monkeypatch.setattr(config, "OVERRIDE", lambda c: config.Config(1, 64, 1, 4, "lookback"))
    x = make_inputs("compute_gae", 2, 300, seed=0)
    scangen.compute_gae(**{k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in x.items()},
                        backend="triton")
    (p,) = runtime._PLANS.values()
    assert p.config.family == "lookback"
    capture = {"id": None}
    monkeypatch.setattr(runtime, "_capture_id", lambda stream: capture["id"])
    monkeypatch.setattr(runtime, "_HELD", [0])
    yield p, capture
    runtime._PLANS.clear()


def _take(p, stream):
    return runtime._captured_workspace(p, p.config, p.kernels["lb_words"], stream)


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
    spare = runtime._new_workspace(p, p.config, p.kernels["lb_words"])
    p.kernels["spare"] = (spare, None)
    capture["id"] = 1
    assert _take(p, stream=1) is not spare, "a spare whose fill is not seen complete stays"
    capture["id"] = 2
    p.kernels["spare_ready"] = True
    assert _take(p, stream=1) is spare
    assert _take(p, stream=1) is spare
    assert "spare" not in p.kernels and "spare_ready" not in p.kernels
    assert runtime._HELD[1:] == [spare] and runtime._HELD[0] == spare.numel() * 4
    assert _take(p, stream=2) is not spare
    capture["id"] = 3
    assert _take(p, stream=1) is not spare


def test_without_the_capture_id_every_call_fills_its_own(plan):
    p, capture = plan
    p.kernels.update(spare=(runtime._new_workspace(p, p.config, p.kernels["lb_words"]), None),
                     spare_ready=True)
    a, b = _take(p, stream=1), _take(p, stream=1)
    assert a is not b and "spare" in p.kernels


def test_capture_id_is_none_outside_a_capture():
    """The driver's capture id (or its absence on a machine without a CUDA driver) reads None
    for a stream that is not capturing: the legacy default stream here."""
    assert runtime._capture_id(0) is None
