"""Checks of scangen's benchmarks: every result against the float64 references before it is
timed.

- :func:`error_ratio` / :func:`tol_ratio`: the largest error over the allowed error
  (``scangen.testing``'s criterion: |actual - expected| <= atol * max(1, max|expected|) +
  rtol * |expected|; <= 1 passes), inf where the shapes or the NaN / inf positions differ;
- :func:`window`: the steps a float64 reference loop covers at long T (a reverse scan's last L
  outputs depend only on its last L inputs, a forward scan's first L only on its first L);
- :class:`Expected`: bench/bench.py's expectations of one configuration, the reference on a
  window of rows and steps and the float64 oracle (the eager vectorised baseline on float64
  copies, every row and step);
- :class:`WindowReference`: ``scangen bench``'s, the reference of every row over a window,
  judged by ``scangen.testing.assert_close`` (whose message it keeps).
"""
from __future__ import annotations

import math

import torch

from .. import testing
from ..testing import reference
from .inputs import as_tuple, slice_kw, time_slice
from .timing import first_line_error

FORWARD = ("compute_eligibility_traces", "compute_episodic_prefix_sum")


def error_ratio(actual, expected, atol, rtol) -> float:
    """max over elements of |actual - expected| / (atol * scale + rtol * |expected|), with
    scale = max(1, max |expected|) over finite entries (<= 1 passes); inf where the shapes or
    the positions of NaN / inf differ. Computed in float64 on ``actual``'s device (tensors or
    arrays)."""
    a = torch.as_tensor(actual).detach()
    e = torch.as_tensor(expected).detach()
    if tuple(a.shape) != tuple(e.shape):
        return math.inf
    a = a.to(torch.float64)
    e = e.to(device=a.device, dtype=torch.float64)
    fin_e = torch.isfinite(e)
    scale = max(1.0, e[fin_e].abs().max().item()) if bool(fin_e.any()) else 1.0
    finite = torch.isfinite(a) & fin_e
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    allowed = atol * scale + rtol * e.abs()
    ratio = torch.where(finite, err / allowed, torch.zeros_like(a)).max().item() if a.numel() else 0.0
    bad = (torch.isnan(a) != torch.isnan(e))
    bad |= (torch.isinf(a) | torch.isinf(e)) & (a != e) & ~torch.isnan(a) & ~torch.isnan(e)
    if bool(bad.any()):
        return math.inf
    return float(ratio)


def tol_ratio(actual, expected, dtype) -> float:
    """:func:`error_ratio` with scangen.testing's tolerances of ``dtype``."""
    tol = testing.tolerance(dtype)
    return error_ratio(actual, expected, tol.atol, tol.rtol)


def window(algo, T, L):
    """``(a, b)``: the steps of a window of at most L: the last ones of a reverse scan, the
    first ones of a forward scan."""
    L = min(T, L)
    return (0, L) if algo in FORWARD else (T - L, T)


def span_ratio(outs, span, exp, espan, rows, tol) -> float:
    """Worst :func:`error_ratio` of ``outs`` (covering steps ``span``) against ``exp``
    (covering ``espan``) on the steps both cover, over the first ``rows`` rows (None: all)."""
    a, b = max(span[0], espan[0]), min(span[1], espan[1])
    if len(outs) != len(exp):
        return math.inf
    return max(error_ratio(torch.as_tensor(o)[:rows, a - span[0]:b - span[0]],
                           e[:rows, a - espan[0]:b - espan[0]], tol.atol, tol.rtol) for o, e in zip(outs, exp))


class Expected:
    """bench/bench.py's: the float64 reference on a slice (first ``ref_rows`` rows; the full T up
    to ``ref_max_t``, else its window end / start, :func:`window`) and the float64 oracle
    (``oracle(**kw64)``: the eager vectorised baseline on float64 copies of the inputs, all rows
    and steps). ``ref``: the reference slice of an earlier call, reused."""

    def __init__(self, algo, kw, N, T, ref_rows, ref_max_t, oracle, ref=None, cuda=False):
        self.rows = min(N, ref_rows)
        if T <= ref_max_t:
            self.tsl, self.what = slice(None), "full T"
        else:
            a, b = window(algo, T, ref_max_t)
            self.tsl, self.what = slice(a, b), (f"first {ref_max_t} steps" if algo in FORWARD
                                                else f"last {ref_max_t} steps")
        self.ref = self.ref_error = self.oracle = self.oracle_error = None
        try:
            self.ref = ref if ref is not None else as_tuple(
                reference.REFERENCES[algo](**slice_kw(kw, self.rows, self.tsl)))
        except Exception as exc:  # noqa: BLE001
            self.ref_error = first_line_error(exc)
        try:
            kw64 = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kw.items()}
            with torch.no_grad():
                self.oracle = as_tuple(oracle(**kw64))
            del kw64
        except Exception as exc:  # noqa: BLE001
            self.oracle_error = first_line_error(exc)
            if cuda:
                torch.cuda.empty_cache()
        self.oracle_vs_ref = None  # the oracle itself against the reference, float64 tolerances
        if self.ref is not None and self.oracle is not None and len(self.ref) == len(self.oracle):
            self.oracle_vs_ref = max(tol_ratio(o[:self.rows][:, self.tsl].cpu(), e, torch.float64)
                                     for o, e in zip(self.oracle, self.ref))

    def check(self, out):
        out = as_tuple(out)
        res = {"ref_window": f"{self.rows} rows, {self.what}"}
        if self.ref is not None:
            if len(out) != len(self.ref):
                res["ref"] = float("inf")
                res["note"] = f"{len(out)} outputs, reference has {len(self.ref)}"
            else:
                res["ref"] = max(tol_ratio(o[:self.rows][:, self.tsl].cpu(), e, o.dtype) for o, e in zip(out, self.ref))
        else:
            res["ref_error"] = self.ref_error
        if self.oracle is not None and len(out) == len(self.oracle):
            res["oracle"] = max(tol_ratio(o, e, o.dtype) for o, e in zip(out, self.oracle))
        elif self.oracle_error:
            res["oracle_error"] = self.oracle_error
        vals = [res[k] for k in ("ref", "oracle") if k in res]
        res["ok"] = bool(vals) and all(v <= 1.0 for v in vals) and "ref" in res
        return res

    def free(self):
        self.ref = self.oracle = None  # the caller may keep the reference slice for a later stage


class WindowReference:
    """``scangen bench``'s: the float64 reference of every row over ``window(algo, T,
    ref_max_t)`` (GAE: advantages and returns, as every implementation computes both)."""

    def __init__(self, algo, kw64, T, ref_max_t):
        self.span = window(algo, T, ref_max_t)
        fn = reference.gae_advantages_and_returns if algo == "compute_gae" else reference.REFERENCES[algo]
        self.ref = as_tuple(fn(**time_slice(kw64, *self.span)))

    def check(self, outs, span, dtype) -> dict:
        """``outs`` (logical [N, ...], covering steps ``span``) against the reference on the
        steps both cover, with scangen.testing.assert_close's tolerance for ``dtype``."""
        outs = as_tuple(outs)
        if len(outs) != len(self.ref):
            return {"ok": False, "err": math.inf, "message": f"{len(outs)} outputs, expected {len(self.ref)}"}
        a, b = max(span[0], self.span[0]), min(span[1], self.span[1])
        tol, worst = testing.tolerance(dtype), 0.0
        steps = f"{a}..{b - 1}"
        for i, (o, e) in enumerate(zip(outs, self.ref)):
            got = torch.as_tensor(o)[:, a - span[0]:b - span[0]]
            exp = e[:, a - self.span[0]:b - self.span[0]]
            worst = max(worst, error_ratio(got, exp, tol.atol, tol.rtol))
            try:
                testing.assert_close(got, exp, dtype=dtype, name=f"output {i}, steps {steps}")
            except AssertionError as exc:
                return {"ok": False, "err": worst, "steps": steps, "message": " ".join(str(exc).split("\n")[:2])}
        return {"ok": True, "err": worst, "steps": steps}
