"""Regenerate the golden files from the float64 references.

    python tests/make_golden.py            # rewrite tests/golden/*.pt
    python tests/make_golden.py --check    # exit 1 if a stored file differs from what the references give now

Each file is torch.save of {"name": public function name, "inputs": keyword arguments exactly as a user
passes them (float32 / bool / int64 tensors and Python floats), "expected": float64 tensor, or a list of
float64 tensors for functions that return a tuple}. Small fixed cases (N=3, T=9) with interior truncations,
one step with both flags set, and bootstrap values at every step, including the ones that must be ignored.
"""

import argparse
import sys
from pathlib import Path

import torch

from scangen.testing import reference
from scangen.testing import make_inputs

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
N, T = 3, 9


def _last_value_per_row_gamma(kw):
    kw["last_value"] = kw.pop("bootstrap_values")[:, -1].clone()
    kw["gamma"] = torch.tensor([[0.8], [0.9], [0.99]])
    return kw


# (file stem, public function, seed, extra make_inputs arguments, constants, transform of the inputs)
CASES = [
    ("compute_gae", "compute_gae", 11, {}, dict(gamma=0.9, lambda_=0.8), None),
    ("compute_vtrace", "compute_vtrace", 12, {},
     dict(gamma=0.9, rho_bar=1.0, c_bar=0.9, lambda_=0.95, pg_rho_bar=1.5), None),
    ("compute_retrace", "compute_retrace", 13, dict(A=4), dict(gamma=0.9, lambda_=0.9, c_bar=1.0, rho_bar=1.0), None),
    ("compute_lambda_returns", "compute_lambda_returns", 14, {}, dict(gamma=0.9, lambda_=0.8), None),
    ("compute_discounted_returns", "compute_discounted_returns", 15, {}, dict(gamma=0.9), None),
    ("compute_eligibility_traces", "compute_eligibility_traces", 16, {}, dict(gamma=0.9, lambda_=0.8), None),
    ("compute_episodic_prefix_sum", "compute_episodic_prefix_sum", 17, {}, {}, None),
    ("compute_masked_gae", "compute_masked_gae", 18, {}, dict(gamma=0.99, lambda_=0.95), None),
    # non-default forms of the same algorithms
    ("compute_gae__last_value_per_row_gamma", "compute_gae", 19, {}, dict(lambda_=0.8), _last_value_per_row_gamma),
    ("compute_eligibility_traces__features", "compute_eligibility_traces", 20, dict(F=(2,)),
     dict(gamma=0.9, lambda_=0.8), None),
    ("compute_episodic_prefix_sum__starts_at", "compute_episodic_prefix_sum", 21, {}, dict(boundary="starts_at"), None),
]


def _check_coverage(stem, kw):
    """Every two-flag case must exercise an interior truncation and a step with both flags."""
    if "truncateds" not in kw:
        return
    interior_trunc = (kw["truncateds"][:, :-1] & ~kw["terminateds"][:, :-1]).any()
    both = (kw["truncateds"] & kw["terminateds"]).any()
    if not (interior_trunc and both):
        raise SystemExit(f"{stem}: seed gives no interior truncation or no step with both flags; pick another")


def build_case(stem, name, seed, draw, constants, transform):
    kw = make_inputs(name, N, T, seed=seed, dtype=torch.float32, trunc_rate=0.2, term_rate=0.15, **draw)
    kw.update(constants)
    if transform is not None:
        kw = transform(kw)
    _check_coverage(stem, kw)
    out = reference.REFERENCES[name](**kw)
    expected = list(out) if isinstance(out, tuple) else out
    return {"name": name, "inputs": kw, "expected": expected}


def _same(a, b):
    """Equal inputs bit for bit; float64 reference outputs within a few ulp, since torch's exp and
    log differ in the last bit between CPUs' vector paths (V-trace's expected values moved by
    5.6e-17 between two VMs of the same image)."""
    if torch.is_tensor(a):
        if not (torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if a.dtype == torch.float64:
            return torch.allclose(a, b, rtol=4 * torch.finfo(a.dtype).eps, atol=0.0, equal_nan=True)
        return torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    GOLDEN_DIR.mkdir(exist_ok=True)
    stale = []
    for stem, *spec in CASES:
        case, path = build_case(stem, *spec), GOLDEN_DIR / f"{stem}.pt"
        if args.check:
            if not path.exists() or not _same(case, torch.load(path, weights_only=True)):
                stale.append(path.name)
        else:
            torch.save(case, path)
            print(f"wrote {path.relative_to(GOLDEN_DIR.parent.parent)} ({path.stat().st_size} bytes)")
    if stale:
        print("stale golden files: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
