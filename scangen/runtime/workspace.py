"""The look-back family's workspace, per plan and CUDA stream, and under CUDA-graph capture.

The look-back kernels pass carries between the programs of a row through words written once
(scangen.kernels.lookback). A plan keeps its workspace across calls, so a call costs no
fill; under capture, calls get workspaces whose fill the graph either does not need (a spare
made by an earlier eager call) or does itself.
"""
from __future__ import annotations

import ctypes
import functools

import torch

from .launch_params import lookback_tickets


def lookback_workspace(c, cfg, n_words: int):
    """The look-back family's workspace: an int64 call counter (tickets), then two halves of
    ``n_words`` arrays of aggregate / inclusive-state words (three per scan, seven per joint
    pair), one word per (row, chunk), made all-one bits once (the counter reads -1, every word
    "not written yet"). Each call works in one half and resets the other for the next call (see
    the kernel), so a plan keeps its workspace across calls, one per CUDA stream (calls on two
    streams may run at once), and a call costs no fill. Under CUDA-graph capture see
    :func:`_captured_workspace`."""
    stream = 0
    if c.device.type == "cuda":
        stream = _raw_stream(c.device.index or 0)
        if torch.cuda.is_current_stream_capturing():
            return _captured_workspace(c, cfg, n_words, stream)
    kept = c.lp.workspaces
    ws = kept.get(stream)
    if ws is None:
        if len(kept) >= MAX_WORKSPACE_STREAMS:  # many short-lived streams: forget the oldest
            del kept[next(iter(kept))]
        ws = kept[stream] = _new_workspace(c, cfg, n_words)
        c.lp.lb_words = n_words  # for the plan's fast path (new streams)
    if not c.lp.spare_ready and c.device.type == "cuda":
        _spare(c, cfg, n_words)
    return ws


def _spare(c, cfg, n_words: int) -> None:
    """An eager call's part in keeping a spare workspace for the plan's next capture: make one
    (filled on this stream, an event recorded after the fill) where there is none, else mark it
    ready once its event has completed, outside any capture, so that a graph never replays
    before the spare's fill is done, whatever stream it replays on."""
    lp = c.lp
    if lp.spare is None:
        if _HELD[0] + 4 * _workspace_int32s(c, cfg, n_words) <= MAX_HELD_BYTES:
            ws = _new_workspace(c, cfg, n_words)
            lp.spare = (ws, torch.cuda.current_stream(c.device).record_event())
    elif lp.spare[1].query():
        lp.spare_ready = True


def _captured_workspace(c, cfg, n_words: int, stream: int):
    """The workspace of a call under CUDA-graph capture. The calls of one plan on one stream of
    one capture (stream order: as eager calls on one stream) share one workspace, which the
    graph's replays advance as calls do. It is the plan's spare if an earlier eager call made
    one whose fill has completed (nothing to fill in the graph; the spare is then kept for the
    life of the process, since the graph writes it on every replay, and never handed to
    another capture, since two graphs may replay at once), else a fresh one filled inside the
    graph (once a replay, not once a call). Without the capture's id (the driver's
    ``cuStreamGetCaptureInfo``), every call makes a fresh one filled in the graph."""
    capture = _capture_id(stream)
    if capture is None:
        return _new_workspace(c, cfg, n_words)
    lp = c.lp
    held = lp.captured
    if held is None or held[0] != capture:  # this capture's first call of the plan
        held = lp.captured = (capture, {})
    ws = held[1].get(stream)
    if ws is None:
        if lp.spare_ready:
            ws, lp.spare, lp.spare_ready = lp.spare[0], None, False
            _HELD[0] += ws.numel() * ws.element_size()
            _HELD.append(ws)
        else:
            ws = _new_workspace(c, cfg, n_words)
        held[1][stream] = ws
    return ws


# Spares handed to captures, kept for the life of the process (after the byte count): a graph
# keeps writing the one it was captured with. Plans stop making spares beyond this many bytes.
_HELD: list = [0]
MAX_HELD_BYTES = 64 << 20


def _capture_id(stream: int):
    """The id of the capture in progress on ``stream`` (a raw CUDA stream handle), or None where
    the driver does not say."""
    fn = _capture_info()
    if fn is None:
        return None
    status, ident = ctypes.c_int(0), ctypes.c_uint64(0)
    try:
        err = fn(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(ident))
    except (OSError, ctypes.ArgumentError):
        return None
    return ident.value if err == 0 and status.value == 1 else None  # 1: capture active


@functools.lru_cache(maxsize=None)
def _capture_info():
    """The driver's cuStreamGetCaptureInfo (stream, status*, id*), or None."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cuda = ctypes.CDLL(lib)
        except OSError:
            continue
        for name, extra in (("cuStreamGetCaptureInfo_v2", 3), ("cuStreamGetCaptureInfo", 0)):
            fn = getattr(cuda, name, None)
            if fn is None:
                continue
            fn.restype = ctypes.c_int
            if extra:  # its (graph, dependencies, count) out-parameters are optional: NULL
                return lambda s, st, i, fn=fn: fn(s, st, i, None, None, None)
            return fn
    return None


MAX_WORKSPACE_STREAMS = 8
# The current stream's handle: torch's raw accessor (what Triton's launcher uses), a third of the
# cost of torch.cuda.current_stream(device).cuda_stream.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream",
                      lambda index: torch.cuda.current_stream(index).cuda_stream)



def _new_workspace(c, cfg, n_words: int):
    # One int32 buffer, carved into the counter and the arrays inside the kernel: the host makes
    # one tensor (each tensor view costs microseconds of Python).
    return torch.full((_workspace_int32s(c, cfg, n_words),), -1, dtype=torch.int32,
                      device=c.device)


def _workspace_int32s(c, cfg, n_words: int) -> int:
    """The workspace's size in int32 words: the int64 counter, then two halves of ``n_words``
    arrays of one word (of the accumulation dtype) per ticket and row of its tile."""
    size = c.acc.itemsize // 4  # int32 words per word of the accumulation dtype
    return 2 + 2 * n_words * size * lookback_tickets(c, cfg) * cfg.block_n
