"""The one contract between the compiler and the runtime.

Everything a generated module and the runtime must agree on is written here once: how the
compiler names the symbols it derives from a spec's names, the descriptors a generated module
describes its op with (:class:`OpInfo`), the order of a Triton kernel's arguments
(:func:`kernel_args`), and how a generated module is loaded from its file. The compiler
(``scangen.compiler``) and the runtime (``scangen.runtime``) both import this module and
nothing of each other.

Name mangling (user names never contain ``__`` and never start with a reserved prefix, which
``scangen.compiler.validate`` checks):

=======================  ====================================================================
``x__next``, ``x__prev`` ``x`` one step later / earlier (also ``__next2``, ``__prev2``)
``HAS_x``                1.0 where the optional input ``x`` was given (a constexpr in kernels)
``STORE_y``              whether output ``y`` is written (a constexpr in kernels)
``p__TENSOR``            whether param ``p`` is a tensor (a constexpr in kernels)
``st__A``                scan ``A``'s state, an output the forward stores for its backward
``gy__y``, ``d__x``      the backward op's input dL/dy and output dL/dx (per step)
``g__A``                 the backward scan of ``A``'s adjoint state
=======================  ====================================================================
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from pathlib import Path
from typing import Callable, NamedTuple

# ---------------------------------------------------------------------------- name mangling

# Time offsets of the shifted symbols: x__next is x one step later.
OFFSETS = {"": 0, "next": 1, "prev": -1, "next2": 2, "prev2": -2}
SHIFT_OF = {v: k for k, v in OFFSETS.items()}
RESERVED_PREFIXES = ("HAS_", "STORE_")
STATE_PREFIX = "st__"


def shifted(name: str, shift: str) -> str:
    """``shifted("x", "next") == "x__next"``; ``shift=""`` gives ``name``."""
    return f"{name}__{shift}" if shift else name


def split_sym(sym: str) -> tuple[str, str]:
    """``"values__next"`` -> ``("values", "next")``; an unshifted name -> ``(name, "")``."""
    for shift in ("next2", "prev2", "next", "prev"):
        if sym.endswith(f"__{shift}"):
            return sym[: -len(shift) - 2], shift
    return sym, ""


def offset_of(sym: str) -> tuple[str, int]:
    """``"x__prev"`` -> ``("x", -1)``."""
    base, shift = split_sym(sym)
    return base, OFFSETS[shift]


def has_flag(name: str) -> str:
    return f"HAS_{name}"


def store_flag(name: str) -> str:
    return f"STORE_{name}"


def tensor_flag(param: str) -> str:
    return f"{param}__TENSOR"


def state_output(scan: str) -> str:
    return f"{STATE_PREFIX}{scan}"


def is_state_output(name: str) -> bool:
    return name.startswith(STATE_PREFIX)


def output_grad(output: str) -> str:
    return f"gy__{output}"


def input_grad(name: str) -> str:
    return f"d__{name}"


def state_grad(scan: str) -> str:
    return f"g__{scan}"


# ------------------------------------------------------------------------------ descriptors

class InputInfo(NamedTuple):
    name: str
    kind: str      # float | flag | index
    shape: str     # NT | N | NTK
    default: float | None   # None: required
    doc: str

    @property
    def optional(self) -> bool:
        return self.default is not None


class ParamInfo(NamedTuple):
    name: str
    default: float | str | None  # a number, another param's name, a choice's key, or None
    doc: str
    choices: tuple


class Kernels(NamedTuple):
    """What a launch of the op's Triton kernels needs to know of them. The kernels themselves
    live in the companion ``<module>_triton`` (:func:`triton_kernels`), so that a process that
    never launches one never imports Triton."""
    lb_words: int    # words of the look-back workspace per (row, chunk): 3 a scan, 7 a pair
    k_dense: bool    # the kernels take the K_DENSE constexpr (specs that sum over K)
    shift_g: bool    # the kernels take the SHIFT_G constexpr
    grouped: bool = False  # the kernels take the GROUPED constexpr (the chunk's step order)


class TritonKernels(NamedTuple):
    """The ``KERNELS`` of a ``<module>_triton`` companion: one ``@triton.jit`` kernel per family
    (``persist`` is None where the module was rendered without it), and each family's lean
    entry kernel (:func:`lean_args`), taken where a call's layout allows."""
    stream: Callable
    persist: Callable | None
    lookback: Callable
    lean_stream: Callable
    lean_persist: Callable | None
    lean_lookback: Callable


class OpInfo(NamedTuple):
    """A generated op, as its module describes it to the runtime."""
    name: str
    function: str
    direction: str
    inputs: tuple[InputInfo, ...]
    params: tuple[ParamInfo, ...]
    outputs: tuple[str, ...]
    returns: tuple[str, ...]
    exclusive: tuple[tuple[str, ...], ...]
    module: str              # the generated module's __name__: its backward, Triton and numba
    kernels: Kernels | None  # kernels live beside it, as <module>_grad, _triton and _numba
    torch_impl: Callable


# -------------------------------------------------------------------- kernel argument order

class Arg(NamedTuple):
    """One argument of a generated Triton kernel.

    ``kind``: ``ptr`` (a tensor or None, per call), ``value`` (a param's float, per call),
    ``int`` (strides and sizes, fixed for a plan) or ``constexpr``. ``role``: ``input``,
    ``param``, ``output``, ``workspace``, ``size``, ``flag`` (HAS_ / STORE_ / __TENSOR) or
    ``tile`` (the launch's block sizes and tuning); ``of``: the input, param or output it
    belongs to."""
    name: str
    kind: str
    role: str
    of: str = ""


def kernel_args(inputs, params, outputs, *, workspace: bool, k_dense: bool,
                shift_g: bool, grouped: bool = False) -> tuple[Arg, ...]:
    """Every kernel's arguments, in order: the per-call ones first (each input's pointer, each
    param's value and pointer, each output's pointer, the look-back's workspace), then the
    integers fixed for a plan (three strides per tensor, a fourth for ``[N, T, K]`` inputs, then
    R1, R2, T, K), then the constexprs. ``inputs``: objects with ``name``, ``shape`` and
    ``optional``; ``params``: with ``name``; ``outputs``: names."""
    ptrs, ints, cx = [], [], []
    for i in inputs:
        ptrs.append(Arg(f"{i.name}__ptr", "ptr", "input", i.name))
        ints += [Arg(f"{i.name}__s{s}", "int", "input", i.name) for s in ("1", "2", "t")]
        if i.shape == "NTK":
            ints.append(Arg(f"{i.name}__sk", "int", "input", i.name))
        if i.optional:
            cx.append(Arg(has_flag(i.name), "constexpr", "flag", i.name))
    for p in params:
        ptrs += [Arg(p.name, "value", "param", p.name), Arg(f"{p.name}__ptr", "ptr", "param",
                                                            p.name)]
        ints += [Arg(f"{p.name}__s{s}", "int", "param", p.name) for s in ("1", "2", "t")]
        cx.append(Arg(tensor_flag(p.name), "constexpr", "flag", p.name))
    for o in outputs:
        ptrs.append(Arg(f"{o}__optr", "ptr", "output", o))
        ints += [Arg(f"{o}__os{s}", "int", "output", o) for s in ("1", "2", "t")]
        cx.append(Arg(store_flag(o), "constexpr", "flag", o))
    if workspace:
        ptrs.append(Arg("_ws", "ptr", "workspace"))
    ints += [Arg(n, "int", "size") for n in ("R1", "R2", "T", "K")]
    cx.append(Arg("EVEN", "constexpr", "tile"))
    cx.append(Arg("ONE_CHUNK", "constexpr", "tile"))
    if k_dense:
        cx.append(Arg("K_DENSE", "constexpr", "tile"))
    if shift_g:
        cx.append(Arg("SHIFT_G", "constexpr", "tile"))
    if grouped:
        cx.append(Arg("GROUPED", "constexpr", "tile"))
    cx += [Arg(n, "constexpr", "tile") for n in TILE_CONSTEXPRS]
    return (*ptrs, *ints, *cx)


# The constexprs every kernel takes last, set from the launch's Config and tuning.
TILE_CONSTEXPRS = ("BLOCK_N", "BLOCK_T", "BLOCK_K", "ACC", "LB_WINDOW", "LB_SPIN", "LB_PID",
                   "LANES", "LANE_WARPS")


def op_kernel_args(op: OpInfo, *, workspace: bool, lean: bool = False) -> tuple[Arg, ...]:
    """:func:`kernel_args` (``lean``: :func:`lean_args`) of a generated op's kernels."""
    return (lean_args if lean else kernel_args)(
        op.inputs, op.params, op.outputs, workspace=workspace, k_dense=op.kernels.k_dense,
        shift_g=op.kernels.shift_g, grouped=op.kernels.grouped)


# The shared stride sets of a lean kernel, per input shape ([N, T] inputs share theirs with the
# outputs); a user's names start with a letter, so these never collide with one.
LEAN_STRIDES = {"NT": ("_s1", "_s2", "_st"), "N": ("_n1", "_n2"),
                "NTK": ("_k1", "_k2", "_kt", "_kk")}


def lean_args(inputs, params, outputs, *, workspace: bool, k_dense: bool,
              shift_g: bool, grouped: bool = False) -> tuple[Arg, ...]:
    """The arguments of the lean entry kernels: :func:`kernel_args` less what a call of the
    common layout leaves unused. Every tensor of one shape shares one stride set
    (:data:`LEAN_STRIDES`: the ``[N, T]`` inputs and the outputs, the ``[N]`` inputs, the
    ``[N, T, K]`` inputs) and every param is a float, passed as its value only. A lean kernel
    calls the full one, each full argument bound by :func:`lean_binding`."""
    shapes = {"NT"} | {i.shape for i in inputs}
    full = kernel_args(inputs, params, outputs, workspace=workspace, k_dense=k_dense,
                       shift_g=shift_g, grouped=grouped)
    ptrs = [a for a in full if a.kind == "value" or a.kind == "ptr" and a.role != "param"]
    ints = [Arg(n, "int", "layout", shape) for shape in LEAN_STRIDES if shape in shapes
            for n in LEAN_STRIDES[shape]]
    ints += [a for a in full if a.role == "size"]
    cx = [a for a in full if a.kind == "constexpr" and a.name != tensor_flag(a.of)]
    return (*ptrs, *ints, *cx)


def lean_binding(a: Arg, shapes: dict) -> str:
    """What a lean kernel passes for the full kernel's argument ``a`` (``shapes``: input name
    -> shape): the shared strides, a float param's value in its unused pointer slot, 0 for its
    strides and False for its ``__TENSOR`` flag."""
    if a.kind == "constexpr" and a.name == tensor_flag(a.of):
        return "False"
    if a.role == "param" and a.kind != "value":  # its pointer slot and strides, never read
        return a.of if a.kind == "ptr" else "0"
    if a.kind == "int" and a.role in ("input", "output"):
        k, names = stride_index(a), LEAN_STRIDES[shapes[a.of] if a.role == "input" else "NT"]
        return names[k] if k < len(names) else "0"  # an [N] input's time stride is 0
    return a.name


def stride_index(a: Arg) -> int:
    """Which of a tensor's canonical strides ``(s1, s2, st[, sk])`` the stride argument ``a``
    (``x__s1`` ... ``x__sk``, outputs ``o__os1`` ...) is."""
    return ("s1", "s2", "st", "sk").index(a.name.rpartition("__")[2].removeprefix("o"))


# ------------------------------------------------------------------------ generated modules

GRAD_SUFFIX = "_grad"       # <module>_grad: the backward op (where the adjoint was generated)
TRITON_SUFFIX = "_triton"   # <module>_triton: the Triton kernels (KERNELS, a TritonKernels)
NUMBA_SUFFIX = "_numba"     # <module>_numba: the CPU kernels


def load_module(name: str, path: Path):
    """Import the generated module at ``path`` as ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def helpers_hash() -> str:
    """A hash of scangen/runtime/numba_kernels.py, which every generated numba module names in
    its header (the compiler writes it; the runtime compares it with the installed helpers):
    numba's disk cache keys a kernel on its own file only, so a change to the helpers it inlines
    must change that file (`scangen build`) to reach the cached kernels."""
    h = _HELPERS_HASH.get("h")
    if h is None:
        text = (Path(__file__).parent / "runtime" / "numba_kernels.py").read_bytes()
        h = _HELPERS_HASH["h"] = hashlib.sha256(text).hexdigest()[:16]
    return h


_HELPERS_HASH: dict = {}


def load_once(name: str, path: Path):
    """:func:`load_module`, once per process however many threads ask at the same time: each
    waits for the module to have run (``sys.modules`` holds it from before that)."""
    module = _LOADED.get(name)
    if module is not None:
        return module
    with _LOAD_LOCK:
        module = _LOADED.get(name) or sys.modules.get(name) or load_module(name, path)
        _LOADED[name] = module
    return module


def companion(op: OpInfo, suffix: str):
    """``op``'s companion module (:data:`GRAD_SUFFIX`, :data:`TRITON_SUFFIX`,
    :data:`NUMBA_SUFFIX`), loaded from the file beside its module's on first use; None where
    there is no such file."""
    name = op.module + suffix
    module = _LOADED.get(name)
    if module is not None:
        return module
    # Not sys.modules: load_module registers a module there before it has run, so a second
    # thread's first call would take a half-initialised module (seen: 6 threads' first numba
    # calls, "module ... has no attribute 'ARRAYS'").
    with _LOAD_LOCK:  # two threads' first calls load it once
        module = _LOADED.get(name) or sys.modules.get(name)
        if module is None:
            path = Path(sys.modules[op.module].__file__)
            path = path.with_name(path.stem + suffix + ".py")
            if not path.is_file():
                return None
            module = load_module(name, path)
        _LOADED[name] = module
    return module


_LOAD_LOCK = threading.RLock()
_LOADED: dict = {}  # companions whose module has finished running


def triton_kernels(op: OpInfo) -> TritonKernels:
    """``op``'s Triton kernels: the ``KERNELS`` of its ``<module>_triton`` companion, which (and
    with it Triton) is imported on the first call of this, the first Triton launch."""
    module = companion(op, TRITON_SUFFIX)
    if module is None:
        raise RuntimeError(f"{op.function}(): no Triton kernels beside {op.module} "
                           f"({op.module.rpartition('.')[2]}{TRITON_SUFFIX}.py); regenerate "
                           f"it (`scangen build`)")
    return module.KERNELS
