"""Plans: what every call of one signature shares, cached by that signature.

A call's *signature* (:func:`signature`) holds everything its checks and launch depend on:
shapes, strides, dtypes, devices, alignment and the types of its params, but not their values
(a new gamma reuses the plan). The first call of a signature runs every check
(:class:`~scangen.runtime.arguments.Call`), picks its backend target and launch configuration,
and keeps a template of itself; later calls bind their tensors to it and run. Each backend
target (``triton``: :mod:`.launch`, ``numba``: :mod:`.numba`, ``torch``: :mod:`.torchpath`)
runs a bound call through ``run(call)``.
"""
from __future__ import annotations

import threading
from typing import Callable

import torch

from . import fastpath, launch, numba, torchpath
from .arguments import Call
from .backends import select_backend
from . import config
from .config import choose_config
from .env import ENV

TARGETS: dict[str, Callable[[Call], None]] = {
    "triton": launch.run, "numba": numba.run, "torch": torchpath.run}


class LaunchPlan:
    """The mutable part of a plan, shared by every call bound to it.

    Triton target: ``meta`` / ``ints`` / ``grid`` (the launch's constexprs, integer arguments
    and grid, built on the first launch), ``lean`` (whether it launches the lean entry
    kernels, :func:`scangen.abi.lean_args`), ``compiled`` (kernel -> its compiled launcher, after
    that launch), ``direct`` (later launches pass None in unused pointer slots), ``seen`` (the
    direct launches made before the fast path was decided), ``fast`` / ``guarded`` (the fast
    paths, :mod:`.fastpath`). Look-back workspaces: ``workspaces`` (by stream), ``lb_words``,
    ``spare`` / ``spare_ready`` / ``captured`` (:mod:`.workspace`). numba target: ``numba``.
    """

    __slots__ = ("meta", "ints", "grid", "lean", "compiled", "direct", "seen", "fast",
                 "guarded", "fast_decided", "workspaces", "lb_words", "spare", "spare_ready",
                 "captured", "numba", "lock")

    def __init__(self):
        self.meta = self.ints = self.grid = None
        self.lean = False
        self.compiled: dict = {}
        self.direct = False
        self.seen: list = []
        self.fast = self.guarded = None
        self.fast_decided = False
        self.workspaces: dict = {}
        self.lb_words = None
        self.spare = None
        self.spare_ready = False
        self.captured = None
        self.numba = None
        self.lock = threading.Lock()

    def take_seen(self) -> list | None:
        """The direct launches seen so far, once: None to every later caller (another thread
        decides the fast path)."""
        with self.lock:
            if self.fast_decided:
                return None
            self.fast_decided = True
            seen, self.seen = self.seen, []
            return seen


class PlanCache(dict):
    """Plans by signature. Clearing it (tests do, after changing the dispatch rule) also
    forgets each op's most recent guarded fast path (:data:`RECENT`)."""

    def clear(self):
        RECENT.clear()
        super().clear()


PLANS: dict = PlanCache()
config.on_change(PLANS.clear)  # a config override in force: plans made outside do not apply
MAX_PLANS = 4096
# id(op) -> (op, guarded): the guarded fast path of the plan an op's last call used, tried
# before the signature is built (scangen.runtime.ops.call); a plan without one leaves (op, None).
RECENT: dict = {}


def signature(op, values: dict, time_dim, outputs, backend):
    """``(key, any_requires_grad)``. The key holds everything the checks and the launch plan
    depend on; param values are left out (a new gamma reuses the plan), except strings and
    other non-floats, which select behaviour. Pointer alignment is in it because the compiled
    kernel the plan keeps was specialised on it."""
    # time_dim by type too: 1.0 == 1 (and hashes alike), but only an int is a time_dim
    sig = [id(op), time_dim if type(time_dim) is int else (type(time_dim), time_dim),
           outputs if not isinstance(outputs, list) else tuple(outputs),
           backend, ENV["SCANGEN_BACKEND"], ENV["SCANGEN_FAMILY"]]
    append, tensor = sig.append, torch.Tensor
    grad = False
    for v in values.values():
        if v is None:
            append(None)
        elif isinstance(v, tensor):  # the device itself: get_device() is -1 on 'meta' too
            append((v.shape, v.stride(), v.dtype, v.device, v.data_ptr() % 16 == 0))
            grad = grad or v.requires_grad
        elif type(v) is float:
            append(float)
        else:
            append((type(v), v))
    return tuple(sig), grad


def call_direct(op, values: dict, *, time_dim: int = -1, outputs=None, backend=None):
    """Check the arguments, allocate outputs and run the chosen backend target, without the
    dispatcher: the custom op's own calls (its implementation, the recomputed backward). Those
    pass a choice param as its code (a tensor) and may ask for the scan states, which a user's
    call may not (:class:`Call`'s ``public``), so their plans are kept apart from users'. The
    first call with a given signature runs every check and works out strides, dtypes and the
    launch configuration; later calls with the same signature reuse that plan."""
    try:
        key = ("op", signature(op, values, time_dim, outputs, backend)[0])
    except (TypeError, RuntimeError):  # unhashable, or a tensor without storage (sparse): no
        key = None                     # plan, the checks will explain
    return run(op, values, key, time_dim, outputs, backend, public=False)


def run(op, values, key, time_dim, outputs, backend, public=True):
    """Run ``op`` on ``values`` through the plan of signature ``key`` (made on a miss).
    ``public``: a user's call (see :func:`call_direct`)."""
    try:
        plan = PLANS.get(key) if key is not None else None
    except TypeError:  # an unhashable argument (a NumPy array, say): the checks will explain
        plan = key = None
    if plan is not None:
        lp = plan.lp
        if lp.fast is not None and not launch.hooked():
            if public:
                RECENT[id(op)] = (op, lp.guarded)
            return lp.fast(values)
        c = plan.bind(values)
        if not c.empty:
            TARGETS[c.backend](c)
    else:
        c = Call(op, values, time_dim, outputs, public)
        c.single = outputs is None and len(op.returns) == 1 or isinstance(outputs, str)
        c.allocate()
        c.empty = c.R1 * c.R2 == 0 or c.T == 0
        c.lp = LaunchPlan()
        # chosen (and so checked) for empty calls too: a backend= typo is an error on any call
        c.backend = select_backend(op.function, backend, c.device)
        c.config = choose_config(c) if c.backend == "triton" and not c.empty else None
        if key is not None and len(PLANS) < MAX_PLANS:
            PLANS[key] = c.template(values)
        if not c.empty:
            TARGETS[c.backend](c)
    if c.empty:
        return c.result()
    lp = c.lp
    if c.backend == "numba" and plan is not None and not lp.fast_decided:
        if lp.take_seen() is not None:  # a plan's second call: decide its fast path
            lp.fast, lp.guarded = fastpath.build_numba(c, values, (time_dim, outputs, backend))
    if (c.backend == "triton" and plan is not None and not lp.fast_decided and lp.seen
            and lp.direct):
        # a plan's second launch (its first direct one): decide its fast path
        if c.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            lp.seen = []  # decided outside capture (no work captured)
        else:
            seen = lp.take_seen()
            if seen is not None:
                lp.fast, lp.guarded = fastpath.build(c, values, seen, (time_dim, outputs,
                                                                       backend))
    return c.result()

