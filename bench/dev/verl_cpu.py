"""verl-style per-token loops against scangen.integrations.verl, on the CPU.

    python bench/dev/verl_cpu.py       # one thread: docs/integrations/verl.md's table
    python bench/dev/verl_cpu.py --threads 2 --rounds 41

The baselines are written here from verl's algorithm (verl 0.9, ``core_algos.py``), not imported:
one iteration per token over the batch, as verl's ``compute_gae_advantage_return`` and
``compute_reinforce_plus_plus_outcome_advantage`` run, then verl's masked whitening. Inputs are
float32 multi-turn batches (turns of 20-200 tokens between tool outputs of 10-100, then
padding). Every candidate's output is checked against the loop's first; then all are timed
interleaved in one process (scangen.benchmark.timing: rotated round-robin, garbage collector
off) and the table gives the medians.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]  # the checkout, for scangen; examples/verl_gae.py

import torch  # noqa: E402

from scangen.benchmark import checks, meta as bench_meta, timing  # noqa: E402
from scangen.integrations import verl as scangen_verl  # noqa: E402
from verl_gae import multi_turn_batch  # noqa: E402

SHAPES = ((64, 4096), (256, 1024))  # batch x response_length


def whiten(x, m):
    mf = m.to(x.dtype)
    n = mf.sum()
    mean = (x * mf).sum() / n
    var = ((x - mean) ** 2 * mf).sum() / n * (n / (n - 1))
    return (x - mean) * torch.rsqrt(var + 1e-8)


def loop_gae(r, v, m, gamma, lam):
    """verl's multi-turn GAE, one token at a time."""
    next_value, last, out = 0.0, 0.0, []
    for t in range(r.shape[1] - 1, -1, -1):
        mt = m[:, t]
        delta = r[:, t] + gamma * next_value - v[:, t]
        last = mt * (delta + gamma * lam * last) + (1 - mt) * last
        next_value = mt * v[:, t] + (1 - mt) * next_value
        out.append(last)
    adv = torch.stack(out[::-1], dim=1)
    return whiten(adv, m), adv + v


def loop_reinforce_pp(r, m, gamma):
    """verl 0.9's REINFORCE++ return, one token at a time."""
    carry, returns = 0.0, torch.zeros_like(r)
    for t in range(r.shape[1] - 1, -1, -1):
        g = r[:, t] + gamma * carry
        returns[:, t] = g * m[:, t]
        carry = g * m[:, t] + carry * (1 - m[:, t])
    return whiten(returns, m) * m, returns


def _check(ref):
    """timing.checked's check: every output within float32 tolerance of the loop's."""
    def check(out):
        ratio = max(checks.error_ratio(a, b, atol=1e-5, rtol=1e-4) for a, b in zip(out, ref))
        return {"ok": ratio <= 1.0, "error_ratio": ratio}
    return check


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=21, help="interleaved samples per candidate")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    gamma, lam = 1.0, 0.95
    config = argparse.Namespace(gamma=gamma)
    meta = bench_meta.machine_meta(ROOT, packages=("torch", "numba", "scangen"))
    print(f"# {meta['cpu']} ({meta['cores']} cores), {torch.get_num_threads()} torch thread(s); "
          f"python {meta['python']}, torch {meta['torch']}, numba {meta['numba']}, scangen "
          f"{meta['scangen']} at {meta['commit']}; medians of {args.rounds} interleaved samples")
    print("| estimator | batch x length | verl-style loop (ms) | scangen, auto = numba (ms) "
          "| speed-up | scangen, torch backend (ms) | speed-up |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for bs, length in SHAPES:
        r, v, m = multi_turn_batch(bs, length)
        rows = {
            "GAE": (lambda: loop_gae(r, v, m, gamma, lam),
                    lambda b: scangen_verl.compute_gae_advantage_return(r, v, m, gamma, lam,
                                                                        backend=b)),
            "REINFORCE++": (lambda: loop_reinforce_pp(r, m, gamma),
                            lambda b: scangen_verl.compute_reinforce_plus_plus_outcome_advantage(
                                r, m, config, backend=b)),
        }
        for name, (loop, ours) in rows.items():
            check = _check(loop())
            cands = [timing.checked("loop", loop, check),
                     timing.checked("auto", lambda: ours(None), check),
                     timing.checked("torch", lambda: ours("torch"), check)]
            for c in cands:
                assert c.ran and c.check["ok"], f"{name} {bs}x{length} {c.name}: " \
                                                f"{c.error or c.check}"
            med = {k: t.median_s * 1e3 for k, t in
                   timing.interleaved({c.name: c.fn for c in cands}, rounds=args.rounds).items()}
            print(f"| {name} | {bs} x {length} | {med['loop']:.1f} | {med['auto']:.2f} | "
                  f"{med['loop'] / med['auto']:.0f}x | {med['torch']:.2f} | "
                  f"{med['loop'] / med['torch']:.0f}x |")


if __name__ == "__main__":
    main()
