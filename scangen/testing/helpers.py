"""Test helpers: per-dtype tolerances, a NaN-aware comparison with useful failure text, and input
generators that draw every algorithm's inputs in their valid domain."""

from typing import NamedTuple

import torch


class Tolerance(NamedTuple):
    atol: float
    rtol: float


# Expected values are float64 references computed from the *same* (already rounded) inputs, so only the
# kernel's own arithmetic and the final rounding of each output to its dtype count here.
# atol is relative to the output's scale, max(1, max|expected|): a scan's rounding error grows with the
# size of the partial sums it carries, so near-zero entries of a long undiscounted sum (gamma = lambda = 1,
# T = 4097: outputs ~200, fp32 errors ~3e-4) would otherwise need a meaninglessly loose rtol everywhere.
TOLERANCES = {
    # float64 inputs accumulate in float64; only summation order differs (~T * 1e-16).
    torch.float64: Tolerance(atol=1e-10, rtol=1e-9),
    # fp32 accumulation over horizons of thousands of steps (measured: a serial fp32 loop is within 2e-6 * scale).
    torch.float32: Tolerance(atol=1e-5, rtol=1e-4),
    # fp32 accumulation, then one rounding to bf16's 8-bit mantissa (half-ulp 2^-9 ~ 2e-3); torch's default rtol.
    torch.bfloat16: Tolerance(atol=1e-3, rtol=1.6e-2),
    # fp32 accumulation, then one rounding to fp16's 11-bit mantissa (half-ulp 2^-11 ~ 5e-4); torch's default rtol.
    torch.float16: Tolerance(atol=1e-4, rtol=1e-3),
}


def tolerance(dtype):
    """TOLERANCES entry for a torch.dtype or its name ("float32", "bfloat16", ...)."""
    return TOLERANCES[getattr(torch, dtype) if isinstance(dtype, str) else dtype]


def assert_close(actual, expected, *, dtype=None, atol=None, rtol=None, name="", max_report=5):
    """|actual - expected| <= atol * scale + rtol * |expected| elementwise, NaN positions identical,
    with scale = max(1, max |expected|) over finite entries (see TOLERANCES).

    dtype picks the TOLERANCES row (default: actual's dtype); atol / rtol override it. A NaN where the
    reference is finite fails, and so does a finite value where the reference is NaN.
    """
    tol = tolerance(actual.dtype if dtype is None else dtype)
    atol, rtol = tol.atol if atol is None else atol, tol.rtol if rtol is None else rtol
    label = f"{name}: " if name else ""
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{label}shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    finite = torch.isfinite(a) & torch.isfinite(e)
    e_finite = e[torch.isfinite(e)]
    scale = max(1.0, e_finite.abs().max().item()) if e_finite.numel() else 1.0
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    bad = finite & (err > atol * scale + rtol * e.abs())
    bad |= torch.isnan(a) != torch.isnan(e)
    bad |= (torch.isinf(a) | torch.isinf(e)) & (a != e) & ~torch.isnan(a) & ~torch.isnan(e)
    if not bad.any():
        return
    rel = torch.where(finite & (e != 0), err / e.abs().clamp_min(1e-300), torch.zeros_like(a))
    lines = [
        f"{label}{int(bad.sum())} of {bad.numel()} elements differ (atol={atol:g} x scale {scale:g}, "
        f"rtol={rtol:g}; actual dtype {actual.dtype}, shape {tuple(a.shape)})",
        f"  max abs error {err.max().item():.3e}, max rel error {rel.max().item():.3e} (finite entries)",
        f"  NaN in actual: {int(torch.isnan(a).sum())}, NaN in expected: {int(torch.isnan(e).sum())}",
    ]
    for idx in bad.nonzero()[:max_report].tolist():
        ai, ei = a[tuple(idx)].item(), e[tuple(idx)].item()
        lines.append(f"  at {tuple(idx)}: actual {ai!r}, expected {ei!r}, diff {ai - ei:.3e}")
    raise AssertionError("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# Input generators

ALGORITHMS = (
    "compute_gae",
    "compute_vtrace",
    "compute_retrace",
    "compute_lambda_returns",
    "compute_discounted_returns",
    "compute_eligibility_traces",
    "compute_episodic_prefix_sum",
    "compute_masked_gae",
)


class _Draw:
    """Every draw happens on the CPU in float64 from one seeded generator, then is cast and moved, so a
    given seed gives the same underlying numbers for every dtype and device."""

    def __init__(self, seed, dtype, device):
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype, self.device = dtype, device

    def out(self, x):
        return x.to(self.device, self.dtype if x.is_floating_point() else x.dtype)

    def normal(self, *shape):
        return torch.randn(shape, generator=self.gen, dtype=torch.float64)

    def uniform(self, lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(shape, generator=self.gen, dtype=torch.float64)

    def bernoulli(self, rate, *shape):
        return torch.rand(shape, generator=self.gen, dtype=torch.float64) < rate

    def randint(self, high, *shape):
        return torch.randint(high, shape, generator=self.gen)

    def flags(self, N, T, term_rate, trunc_rate):
        term, trunc = self.bernoulli(term_rate, N, T), self.bernoulli(trunc_rate, N, T)
        if term_rate > 0 and trunc_rate > 0:  # always one step where termination must win
            i, t = self.randint(N).item(), self.randint(T).item()
            term[i, t] = trunc[i, t] = True
        return term, trunc


def _same_trajectory_next(term, trunc):
    """[N, T] bool: True where step t+1 belongs to the same trajectory as step t."""
    same = ~(term | trunc)
    same[:, -1] = False
    return same


def _gae(d, N, T, term, trunc, **_):
    return dict(rewards=d.normal(N, T), values=d.normal(N, T), terminateds=term, truncateds=trunc,
                bootstrap_values=d.normal(N, T))


def _vtrace(d, N, T, term, trunc, **_):
    return dict(log_pi_target=d.uniform(0.1, 1.0, N, T).log(), log_pi_behavior=d.uniform(0.1, 1.0, N, T).log(),
                values=d.normal(N, T), rewards=d.normal(N, T), terminateds=term, truncateds=trunc,
                bootstrap_values=d.normal(N, T))


def _retrace(d, N, T, term, trunc, A, **_):
    # One trajectory of states: the successor of t is state t+1 unless the episode ended there, in which
    # case it is a fresh state drawn here (the true terminal / truncated successor, not the next reset).
    q_all, pi = d.normal(N, T, A), d.normal(N, T, A).softmax(-1)
    succ_q, succ_pi = d.normal(N, T, A), d.normal(N, T, A).softmax(-1)
    same = _same_trajectory_next(term, trunc)[..., None]
    succ_q[:, :-1] = torch.where(same[:, :-1], q_all[:, 1:], succ_q[:, :-1])
    succ_pi[:, :-1] = torch.where(same[:, :-1], pi[:, 1:], succ_pi[:, :-1])
    actions = d.randint(A, N, T)
    return dict(action_probs_target=pi, action_probs_behavior=d.uniform(0.1, 1.0, N, T),
                q_values=q_all.gather(-1, actions[..., None]).squeeze(-1), next_q_values_all=succ_q,
                actions=actions, rewards=d.normal(N, T), terminateds=term, truncateds=trunc,
                next_action_probs_target=succ_pi)


def _lambda_returns(d, N, T, term, trunc, **_):
    return dict(rewards=d.normal(N, T), next_values=d.normal(N, T), terminateds=term, truncateds=trunc,
                bootstrap_values=d.normal(N, T))


def _discounted_returns(d, N, T, term, trunc, **_):
    return dict(rewards=d.normal(N, T), terminateds=term, truncateds=trunc, bootstrap_values=d.normal(N, T))


def _eligibility_traces(d, N, T, term, trunc, F, **_):
    feat = () if F is None else ((F,) if isinstance(F, int) else tuple(F))
    return dict(gradients=d.normal(N, T, *feat), dones=term | trunc, gamma=0.99, lambda_=0.9,
                seed_values=d.normal(N, *feat))


def _episodic_prefix_sum(d, N, T, term, trunc, **_):
    return dict(inputs=d.normal(N, T), dones=term | trunc, seed_values=d.normal(N))


def _response_mask(d, N, T):
    """Multi-turn LLM traces: assistant tokens (1) alternating with tool output (0), then padding (0)."""
    mask = torch.zeros(N, T, dtype=torch.bool)
    longest_run = max(1, T // 4)
    for i in range(N):
        end = T - d.randint(T // 3 + 1).item()  # right padding
        t, on = 0, bool(d.randint(4).item())  # mostly opens with assistant tokens, sometimes not
        while t < end:
            run = 1 + d.randint(longest_run).item()
            mask[i, t:min(t + run, end)] = on
            t, on = t + run, not on
    return mask


def _masked_gae(d, N, T, **_):
    return dict(token_level_rewards=d.normal(N, T), values=d.normal(N, T), response_mask=_response_mask(d, N, T))


_GENERATORS = {
    "compute_gae": _gae,
    "compute_vtrace": _vtrace,
    "compute_retrace": _retrace,
    "compute_lambda_returns": _lambda_returns,
    "compute_discounted_returns": _discounted_returns,
    "compute_eligibility_traces": _eligibility_traces,
    "compute_episodic_prefix_sum": _episodic_prefix_sum,
    "compute_masked_gae": _masked_gae,
}


def time_major_buffers(inputs):
    """``[T, N(, K)]`` contiguous copies of ``[N, T(, K)]`` values, to pass with ``time_dim=0``,
    for a tensor or a dict of arguments; tensors of one dimension and non-tensors pass unchanged."""
    if isinstance(inputs, dict):
        return {k: time_major_buffers(v) for k, v in inputs.items()}
    if torch.is_tensor(inputs) and inputs.dim() >= 2:
        return inputs.transpose(0, 1).contiguous()
    return inputs


def as_time_major(inputs):
    """The same logical ``[N, T(, K)]`` values stored time-major (rows adjacent in memory): the
    ``[N, T(, K)]`` views of :func:`time_major_buffers`, for a tensor or a dict of arguments;
    tensors of one dimension and non-tensors pass unchanged."""
    if isinstance(inputs, dict):
        return {k: as_time_major(v) for k, v in inputs.items()}
    if torch.is_tensor(inputs) and inputs.dim() >= 2:
        return time_major_buffers(inputs).transpose(0, 1)
    return inputs


def make_inputs(algo_name, N, T, *, seed, dtype=torch.float32, device="cpu", trunc_rate=0.05, term_rate=0.05,
                A=4, F=None):
    """Keyword arguments for scangen.<algo_name> (also accepted without the "compute_" prefix).

    Floating inputs are `dtype`, flags and masks bool, actions int64. Bootstrap values are drawn at every
    step, including those where they must be ignored; seeds for the forward scans are included too.
    Drop keys (bootstrap_values, seed_values, truncateds) to test the defaults.
    """
    name = algo_name if algo_name.startswith("compute_") else f"compute_{algo_name}"
    if name not in _GENERATORS:
        raise ValueError(f"unknown algorithm {algo_name!r}; expected one of {ALGORITHMS}")
    d = _Draw(seed, dtype, device)
    term, trunc = d.flags(N, T, term_rate, trunc_rate)
    kwargs = _GENERATORS[name](d, N, T, term=term, trunc=trunc, A=A, F=F)
    return {k: d.out(v) if torch.is_tensor(v) else v for k, v in kwargs.items()}


def compile_offline(module, family: str = "stream", *, arch: int = 90, num_warps: int = 4,
                    block_n: int = 1, block_t: int = 1024, block_k: int = 1, acc=None,
                    present: bool = True, contiguous: bool = True, time_major: bool = False,
                    even: bool | None = None, lb_window: int | None = None, lb_spin: bool = False,
                    lb_pid: bool = False, lean: bool = False, grouped: bool = False,
                    fixed: dict | None = None, one_chunk: bool = False, lanes: int = 0,
                    lane_warps: int | None = None, maxnreg: int = 0):
    """Compile one generated kernel to a cubin for ``sm_<arch>`` with no GPU (Triton's frontend,
    its NVIDIA passes and the bundled ptxas): catches what the interpreter lets through (types
    that change across branches or loop iterations) and gives the PTX for a resource report.
    Optional inputs are all present (or all absent), every output is stored, params are floats.
    ``contiguous`` specialises as Triton's launcher does for ``[N, T]`` rows with T a multiple of
    16: time strides equal to 1, pointers and other integers divisible by 16. ``even``: every
    tile full (runtime.launch.even; default: as the launcher sets it for full tiles). ``time_major``
    specialises as it does for time-major ``[T, N]`` buffers with N a multiple of 16 instead:
    row strides and ``R2`` equal to 1 (one row dimension), time strides divisible by 16.
    ``lb_window``, ``lb_spin``, ``lb_pid``: the look-back's window, wait and order
    (runtime.launch_params.lookback_window, lookback_spin and lookback_pid); the window defaults
    to the time-major look-back's (launch_params.TM_LB_WINDOW) with ``time_major``, else 128
    (the window's tile is a large part of a look-back kernel's registers: count with the
    launch's). ``lean``: the family's lean entry kernel (scangen.abi.lean_args), which calls the
    full one. ``grouped``: the
    GROUPED step order of kernels that take it (runtime.launch_params.grouped_order; SHIFT_G is then 1).
    ``one_chunk``: the ONE_CHUNK constexpr (runtime.launch.one_chunk: T <= BLOCK_T).
    ``lanes``: the LANES constexpr (runtime.launch.lanes: time-major tiles, a row a lane; 2 with
    volatile loads). ``lane_warps``: the LANE_WARPS constexpr (default: runtime.launch.lane_warps
    for the tile; 1 gives the columns' own order, each warp's steps interleaved).
    ``fixed``: integer arguments compiled as constants (``{"T": 1024}``), for what-if reports.
    ``maxnreg``: registers a thread at most (runtime.launch.MAXNREG; 0: ptxas decides).
    """
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ..abi import op_kernel_args, triton_kernels
    from ..runtime.launch import lane_warps as _lane_warps
    from ..runtime.launch import layout_steps
    from ..runtime.launch_params import TM_LB_WINDOW
    from ..runtime.tiles import Config

    op = module.OP
    kernel = getattr(triton_kernels(op), f"lean_{family}" if lean else family)
    args = op_kernel_args(op, workspace=family == "lookback", lean=lean)
    assert [a.name for a in args] == [p.name for p in kernel.params], "kernel_args differs"
    inputs = {i.name: i for i in op.inputs}
    ptr = {"float": "*fp32", "flag": "*i8", "index": "*i64"}
    acc = acc or tl.float32
    fp = "*fp64" if acc == tl.float64 else "*fp32"
    tile = dict(BLOCK_N=block_n, BLOCK_T=block_t, BLOCK_K=block_k, ACC=acc,
                EVEN=family != "persist" if even is None else even,
                LB_WINDOW=(lb_window if lb_window is not None
                           else TM_LB_WINDOW if time_major else 128),
                ONE_CHUNK=one_chunk, LANES=lanes,
                LANE_WARPS=(_lane_warps(Config(block_n, block_t, block_k, num_warps, family), lanes)
                            if lane_warps is None else lane_warps),
                LB_SPIN=lb_spin, LB_PID=lb_pid, GROUPED=grouped, **({"SHIFT_G": 1} if grouped else {}))
    sig, consts, attrs = {}, {}, {}
    for i, a in enumerate(args):
        n = a.name
        ntk = (a.role == "input" and n.endswith("__st") and inputs[a.of].shape == "NTK"
               or n == "_kt")
        dynamic = a.kind in ("ptr", "int")  # Triton's launcher specialises these on 16
        if fixed and n in fixed:
            sig[n], consts[(i,)] = "constexpr", fixed[n]
            continue
        if time_major and (n.endswith("__s1") or n.endswith("__os1") or n == "R2"
                           or n in ("_s1", "_n1", "_k1")):
            sig[n], consts[(i,)] = "constexpr", 1  # one row dimension, adjacent rows
            continue
        if time_major and dynamic:
            attrs[(i,)] = [["tt.divisibility", 16]]
        if contiguous and not time_major and n == "R2":  # [N, T] rows: no dims after time
            sig[n], consts[(i,)] = "constexpr", 1
            continue
        if contiguous and not time_major and (n.endswith("__st") or n.endswith("__ost")
                                              or n == "_st") and not ntk:
            sig[n], consts[(i,)] = "constexpr", 1  # unit time strides
            continue
        if ntk:  # the time stride of [N, T, K] rows is K: an int Triton knows nothing about
            sig[n] = "i32"
            continue
        if contiguous and not time_major and dynamic:
            attrs[(i,)] = [["tt.divisibility", 16]]
        if a.kind == "constexpr":  # optional inputs as ``present``, outputs stored, floats
            sig[n] = "constexpr"
            consts[(i,)] = tile.get(n, present if a.name.startswith("HAS_")
                                    else not n.endswith("__TENSOR"))
        elif a.kind == "ptr":
            sig[n] = ("*i32" if a.role == "workspace" else
                      ptr[inputs[a.of].kind] if a.role == "input" else fp)
        elif a.kind == "value":
            sig[n] = "fp32"
        else:
            sig[n] = "i32"
    if "SHIFT_G" in sig and not grouped:  # as runtime.launch.shift_group would choose
        i = [a.name for a in args].index("SHIFT_G")
        nt = [sig[a.name] for a in args if a.kind == "ptr" and a.role != "workspace"
              and sig[a.name].startswith("*")]
        size = min({"*i8": 1, "*i64": 8, "*fp64": 8}.get(t, 4) for t in nt)
        consts[(i,)] = (layout_steps(size, block_n, block_t, num_warps)
                        if contiguous and not time_major else 1)
    src = ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, enable_fp_fusion=True,  # as launch.launch
                                       **({"maxnreg": maxnreg} if maxnreg else {})))


def compile_case(module, family: str, *, block_n: int, block_t: int, general: bool = False,
                 **options):
    """:func:`compile_offline` for one case of the offline checks (tests/test_offline_compile.py,
    bench/dev/ptx_digest.py): ops with ``[N, T, K]`` inputs take ``K = 8`` and ``block_t / 8``
    steps (at least 16), as their launches do; ``general``: float64 accumulation, optional inputs
    absent and strides Triton knows nothing about, instead of present inputs and contiguous rows."""
    import triton.language as tl

    k = 8 if any(i.shape == "NTK" for i in module.OP.inputs) else 1
    return compile_offline(module, family, block_n=block_n, block_t=max(16, block_t // k),
                           block_k=k, acc=tl.float64 if general else None, present=not general,
                           contiguous=not general, **options)


def compile_variant(name: str, cache_dir, **options):
    """The built-in ``specs/<name>.yaml`` compiled with template ``options``
    (:class:`scangen.compiler.options.Options`), under a name that says which: for side-by-side
    measurements (bench/dev/sweep.py --variants) and their tests."""
    from ..compiler.options import Options
    from ..compiler.store import compile_spec, spec_dir

    suffix = "".join(f"_{k}_{v}" for k, v in sorted(options.items()))
    return compile_spec(spec_dir() / f"{name}.yaml", cache_dir, Options.of(options),
                        name_suffix=suffix)
