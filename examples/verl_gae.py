"""verl's token-level GAE and REINFORCE++ through scangen, on a multi-turn batch.

    python examples/verl_gae.py            # CPU tensors, as verl's driver holds them
    python examples/verl_gae.py --device cuda

Each response holds the policy's tokens, tool outputs (mask 0) between its turns, and right
padding. scangen's results are checked against verl's per-token loop, written out below in
float64; where verl itself is installed, against verl's functions too, and register() puts
scangen_gae and scangen_reinforce_plus_plus into verl's estimator registry.
"""
import argparse
import statistics
import time
import types

import torch

from scangen.integrations import verl as scangen_verl


def multi_turn_batch(bs, length, seed=0):
    """Rewards (a score on each response's last token, a small per-token KL-like term), values
    and a response mask of turns separated by tool outputs, then padding."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(bs, length, dtype=torch.int64)
    for i in range(bs):
        t, end = 0, int(torch.randint(length // 2, length + 1, (), generator=g))
        while t < end:
            turn = int(torch.randint(20, 200, (), generator=g))
            mask[i, t:min(t + turn, end)] = 1
            t += turn + int(torch.randint(10, 100, (), generator=g))  # then a tool output
    rewards = -0.01 * torch.rand(bs, length, generator=g) * mask
    last = length - 1 - mask.flip(1).argmax(1)
    rewards[torch.arange(bs), last] += torch.randint(0, 2, (bs,), generator=g).float()
    values = torch.randn(bs, length, generator=g) * 0.1
    return rewards, values, mask


def verl_loop_gae(r, v, m, gamma, lam):
    """verl's GAE in float64: values and advantages carried across tokens with mask 0, then
    the advantages whitened over the response tokens."""
    r, v, m = r.double(), v.double(), m.double()
    next_value = last = torch.zeros(r.shape[0], dtype=torch.float64)
    adv = torch.empty_like(r)
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * next_value - v[:, t]
        last = m[:, t] * (delta + gamma * lam * last) + (1 - m[:, t]) * last
        next_value = m[:, t] * v[:, t] + (1 - m[:, t]) * next_value
        adv[:, t] = last
    return whiten(adv, m), adv + v


def verl_loop_reinforce_pp(r, m, gamma):
    """verl 0.9's REINFORCE++ in float64: the discounted return over the response tokens,
    carried unchanged across tokens with mask 0; whitened, then masked."""
    r, m = r.double(), m.double()
    carry = torch.zeros(r.shape[0], dtype=torch.float64)
    returns = torch.empty_like(r)
    for t in reversed(range(r.shape[1])):
        g = r[:, t] + gamma * carry
        returns[:, t] = m[:, t] * g
        carry = m[:, t] * g + (1 - m[:, t]) * carry
    return whiten(returns, m) * m, returns


def whiten(x, m):
    sel = x[m.bool()]
    return (x - sel.mean()) / (sel.var() + 1e-8).sqrt()  # unbiased variance, as verl


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--length", type=int, default=2048)
    args = p.parse_args()
    gamma, lam = 1.0, 0.95
    r, v, m = (x.to(args.device) for x in multi_turn_batch(args.bs, args.length))

    scangen_verl.compute_gae_advantage_return(r, v, m, gamma, lam)  # first call: plan, JIT
    sync = torch.cuda.synchronize if r.is_cuda else (lambda: None)
    times = []
    for _ in range(20):  # one call's time moves a lot on a busy machine: the median of 20
        sync()
        t0 = time.perf_counter()
        adv, ret = scangen_verl.compute_gae_advantage_return(r, v, m, gamma, lam)
        sync()
        times.append(time.perf_counter() - t0)
    elapsed = statistics.median(times)
    exp_adv, exp_ret = verl_loop_gae(r.cpu(), v.cpu(), m.cpu(), gamma, lam)
    err = max((adv.cpu().double() - exp_adv).abs().max().item(),
              (ret.cpu().double() - exp_ret).abs().max().item())
    print(f"GAE {args.bs} x {args.length} on {args.device}: {elapsed * 1e3:.2f} ms (median of "
          f"20 calls, {torch.get_num_threads()} threads), "
          f"max abs error vs float64 loop {err:.2e}")
    assert err < 1e-4

    config = types.SimpleNamespace(gamma=gamma)  # verl passes its AlgoConfig
    adv, ret = scangen_verl.compute_reinforce_plus_plus_outcome_advantage(r, m, config)
    exp_adv, exp_ret = verl_loop_reinforce_pp(r.cpu(), m.cpu(), gamma)
    err = max((adv.cpu().double() - exp_adv).abs().max().item(),
              (ret.cpu().double() - exp_ret).abs().max().item())
    print(f"REINFORCE++ max abs error vs float64 loop {err:.2e}")
    assert err < 1e-4

    try:
        from omegaconf import OmegaConf
        from verl.trainer.ppo import core_algos
    except Exception as e:  # noqa: BLE001 - verl needs ray and transformers to import
        print(f"verl not importable here ({type(e).__name__}: {e}); skipped the comparison")
        return
    config = OmegaConf.create({"gamma": gamma, "lam": lam})
    scangen_verl.register()
    pairs = (("scangen_gae", "gae"), ("scangen_reinforce_plus_plus", "reinforce_plus_plus"))
    for name, ref in pairs:
        extra = {"values": v} if ref == "gae" else {}
        ours = core_algos.get_adv_estimator_fn(name)(
            token_level_rewards=r, response_mask=m, config=config, **extra)
        theirs = (core_algos.compute_gae_advantage_return(r, v, m, gamma, lam) if ref == "gae"
                  else core_algos.get_adv_estimator_fn(ref)(token_level_rewards=r, response_mask=m,
                                                           config=config))
        diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
        print(f"{name} vs verl's {ref}: max abs difference {diff:.2e}")


if __name__ == "__main__":
    main()
