"""Template options: the ways the Triton kernels can be written, as one frozen value.

The defaults are what every shipped kernel uses; the others are kept so that they can be
measured side by side (``bench/dev/sweep.py --variants``, ``scangen.testing.compile_variant``).
An :class:`Options` value is passed explicitly to the renderer and is part of the run-time cache
key (:func:`scangen.compiler.store.cache_key`), so two variants never share a cached module.

* ``shift``: how a scan reads its neighbouring state (``next(A)`` / ``prev(A)``): ``"scan"``
  carries the exclusive map through the scan itself; ``"gather"`` shifts the state tile with
  ``tl.gather``.
* ``input_shift``: how a shifted input (``next(x)`` / ``prev(x)``) is read: ``"split"`` loads the
  aligned tile with vector loads and takes the shifted one from it in registers (each thread
  holds SHIFT_G consecutive steps, shifted within the thread by ``tl.split`` / ``tl.join``, plus
  one strided load per group for the step beyond it); ``"load"`` reads ``x`` again at
  ``t +- 1``, an unaligned load that compiles to scalar loads; ``"gather"`` shifts the aligned
  tile with ``tl.gather``. The persist family needs ``"split"`` or ``"load"``: with ``"gather"``
  the module has no persist kernel and the stream kernel runs in its place.
* ``chain``: how two chained scans run (:class:`scangen.compiler.plan.JointPlan`: the second
  reads the first's state one step nearer the carry, as masked GAE's advantage reads the next
  valid value): ``"joint"`` scans both at once as one scan of 2x2 triangular affine maps (five
  words per step, one look-back over five-word aggregates); ``"sequential"`` scans the first,
  then the second.
* ``scan_order``: the order of a reverse scan's steps within a chunk: ``"grouped"`` (the groups
  of steps each thread holds in reverse order, reversed again in registers, then a forward
  scan, so the loads keep their vectors) or ``"natural"`` (``tl.associative_scan(reverse=True)``,
  which reverses lanes with shuffles). Grouped applies only where it pays: not with a
  ``"gather"`` shift (the gathers index natural columns) nor for specs with ``[N, T, K]`` inputs
  (one step per thread: the whole chunk would be reversed).

bench/NOTES.md has the measurements behind each default.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

CHOICES = {"shift": ("scan", "gather"), "input_shift": ("split", "load", "gather"),
           "chain": ("joint", "sequential"), "scan_order": ("grouped", "natural")}


@dataclass(frozen=True)
class Options:
    shift: str = "scan"
    input_shift: str = "split"
    chain: str = "joint"
    scan_order: str = "grouped"

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if value not in CHOICES[f.name]:
                raise ValueError(f"Options.{f.name} = {value!r}: expected one of "
                                 f"{', '.join(CHOICES[f.name])}")

    @classmethod
    def of(cls, options) -> "Options":
        """``options`` as an :class:`Options`: itself, None (the defaults) or a mapping."""
        if options is None:
            return DEFAULT
        if isinstance(options, cls):
            return options
        unknown = sorted(set(options) - set(CHOICES))
        if unknown:
            raise ValueError(f"unknown template option {unknown[0]!r} (options: "
                             f"{', '.join(CHOICES)})")
        return cls(**options)

    def as_dict(self) -> dict:
        return asdict(self)

    def key(self) -> str:
        """A stable text of the options, for cache keys."""
        return repr(sorted(self.as_dict().items()))


DEFAULT = Options()
