"""The eight built-ins written as Python spec objects, as a user would, without the YAML.

tests/test_compiler.py checks that each lowers to the same IR as its specs/*.yaml twin (docs
aside), so the two front ends cannot drift apart.
"""
from scangen import Input, Output, Param, Scan, Spec

NT_FLAGS = [Input("terminateds", kind="flag"), Input("truncateds", kind="flag", default=0)]
DONE_CUT = [("done", "max(terminateds, truncateds)"), ("cut", "where(is_last, 1, done)")]
BOOT = ("boot", "where(is_last, bootstrap_values + last_value, bootstrap_values)")
BOOT_INPUTS = [Input("bootstrap_values", default=0), Input("last_value", shape="N", default=0)]

GAE = Spec(
    name="gae", function="compute_gae", direction="reverse",
    signature=["rewards", "values", "terminateds", "truncateds", "gamma", "lambda_",
               "bootstrap_values", "last_value"],
    inputs=[Input("rewards"), Input("values"), *NT_FLAGS, *BOOT_INPUTS],
    exclusive=[["bootstrap_values", "last_value"]],
    params=[Param("gamma", 0.99), Param("lambda_", 0.95)],
    let=DONE_CUT + [BOOT, ("v_next", "where(cut, where(terminateds, 0, boot), next(values, 0))"),
                    ("delta", "rewards + gamma * v_next - values")],
    scans=[Scan("A", update="delta + gamma * lambda_ * (1 - done) * A")],
    outputs=[Output("advantages", "A"), Output("returns", "A + values")],
    returns=["advantages"])

DISCOUNTED_RETURNS = Spec(
    name="discounted_returns", function="compute_discounted_returns", direction="reverse",
    signature=["rewards", "terminateds", "truncateds", "gamma", "bootstrap_values"],
    inputs=[Input("rewards"), *NT_FLAGS, Input("bootstrap_values", default=0)],
    params=[Param("gamma", 0.99)],
    let=[("cut", "where(is_last, 1, max(terminateds, truncateds))")],
    scans=[Scan("G", alpha="rewards + gamma * where(cut, where(terminateds, 0, bootstrap_values), 0)",
                beta="gamma * (1 - cut)")],
    outputs=[Output("returns", "G")])

VTRACE = Spec(
    name="vtrace", function="compute_vtrace", direction="reverse",
    signature=["log_pi_target", "log_pi_behavior", "values", "rewards", "terminateds",
               "truncateds", "gamma", "rho_bar", "c_bar", "bootstrap_values", "last_value",
               "lambda_", "pg_rho_bar"],
    inputs=[Input("log_pi_target"), Input("log_pi_behavior"), Input("values"), Input("rewards"),
            *NT_FLAGS, *BOOT_INPUTS],
    exclusive=[["bootstrap_values", "last_value"]],
    params=[Param("gamma", 0.99), Param("rho_bar", 1.0), Param("c_bar", 1.0),
            Param("lambda_", 1.0), Param("pg_rho_bar", "rho_bar")],
    let=[("ratio", "exp(log_pi_target - log_pi_behavior)")] + DONE_CUT + [
        BOOT, ("v_next", "where(terminateds, 0, where(cut, boot, next(values, 0)))"),
        ("vs_next", "where(terminateds, 0, where(cut, boot, next(values, 0) + next(A, 0)))")],
    scans=[Scan("A", update="min(rho_bar, ratio) * (rewards + gamma * v_next - values)"
                            " + gamma * lambda_ * min(c_bar, ratio) * (1 - done) * A")],
    outputs=[Output("targets", "values + A"),
             Output("pg_advantages", "min(pg_rho_bar, ratio) * (rewards + gamma * "
                                     "(lambda_ * vs_next + (1 - lambda_) * v_next) - values)")])

RETRACE = Spec(
    name="retrace", function="compute_retrace", direction="reverse",
    signature=["action_probs_target", "action_probs_behavior", "q_values", "next_q_values_all",
               "actions", "rewards", "terminateds", "truncateds", "gamma", "lambda_", "c_bar",
               "rho_bar", "*", "next_action_probs_target"],
    inputs=[Input("action_probs_target", shape="NTK"), Input("action_probs_behavior"),
            Input("q_values"), Input("next_q_values_all", shape="NTK"),
            Input("actions", kind="index"), Input("rewards"), *NT_FLAGS,
            Input("next_action_probs_target", shape="NTK")],
    params=[Param("gamma", 0.99), Param("lambda_", 1.0), Param("c_bar", 1.0),
            Param("rho_bar", 1.0)],
    let=[("ratio", "gather(action_probs_target, actions) / action_probs_behavior"),
         ("c", "lambda_ * min(c_bar, ratio)"),
         ("eq", "sum(next_action_probs_target * next_q_values_all)")] + DONE_CUT + [
        ("discount", "gamma * (1 - terminateds)")],
    scans=[Scan("A", alpha="rewards + discount * eq - q_values",
                beta="gamma * next(c, 0) * (1 - done)")],
    outputs=[Output("targets", "q_values + A"),
             Output("advantages", "min(rho_bar, ratio) * (rewards + discount * "
                                  "where(cut, eq, next(q_values, 0) + next(A, 0)) - q_values)")])

LAMBDA_RETURNS = Spec(
    name="lambda_returns", function="compute_lambda_returns", direction="reverse",
    signature=["rewards", "next_values", "terminateds", "truncateds", "gamma", "lambda_",
               "bootstrap_values"],
    inputs=[Input("rewards"), Input("next_values"), *NT_FLAGS,
            Input("bootstrap_values", default=0)],
    params=[Param("gamma", 0.99), Param("lambda_", 0.95)],
    let=[("cut", "where(is_last, 1, max(terminateds, truncateds))"),
         ("nv", "where(present(bootstrap_values) * where(is_last, 1, truncateds), "
                "where(terminateds, 0, bootstrap_values), next_values)")],
    scans=[Scan("G", alpha="rewards + gamma * (1 - terminateds) * nv * (1 - lambda_ * (1 - cut))",
                beta="gamma * lambda_ * (1 - cut)")],
    outputs=[Output("returns", "G")])

ELIGIBILITY_TRACES = Spec(
    name="eligibility_traces", function="compute_eligibility_traces", direction="forward",
    signature=["gradients", "dones", "gamma", "lambda_", "seed_values"],
    inputs=[Input("gradients"), Input("dones", kind="flag"),
            Input("seed_values", shape="N", default=0)],
    params=[Param("gamma"), Param("lambda_")],
    scans=[Scan("z", update="gradients + gamma * lambda_ * (1 - prev(dones, 0)) * z",
                init="seed_values")],
    outputs=[Output("traces", "z")])

EPISODIC_PREFIX_SUM = Spec(
    name="episodic_prefix_sum", function="compute_episodic_prefix_sum", direction="forward",
    signature=["inputs", "dones", "seed_values", "boundary"],
    inputs=[Input("inputs"), Input("dones", kind="flag"),
            Input("seed_values", shape="N", default=0)],
    params=[Param("boundary", "ends_at", choices=(("ends_at", 0), ("starts_at", 1)))],
    let=[("reset", "where(boundary, dones, prev(dones, 0))")],
    scans=[Scan("C", update="inputs + (1 - reset) * C", init="seed_values")],
    outputs=[Output("sums", "C")])

MASKED_GAE = Spec(
    name="masked_gae", function="compute_masked_gae", direction="reverse",
    signature=["token_level_rewards", "values", "response_mask", "gamma", "lambda_"],
    inputs=[Input("token_level_rewards"), Input("values"), Input("response_mask", kind="flag")],
    params=[Param("gamma", 1.0), Param("lambda_", 1.0)],
    let=[("v", "where(response_mask, values, 0)"),
         ("r", "where(response_mask, token_level_rewards, 0)")],
    scans=[Scan("nv", update="v + (1 - response_mask) * nv"),
           Scan("A", update="r - v + response_mask * gamma * (next(nv, 0) + lambda_ * A)"
                            " + (1 - response_mask) * A")],
    outputs=[Output("advantages", "A"), Output("returns", "A + values")])

ALL = {s.name: s for s in (GAE, DISCOUNTED_RETURNS, VTRACE, RETRACE, LAMBDA_RETURNS,
                           ELIGIBILITY_TRACES, EPISODIC_PREFIX_SUM, MASKED_GAE)}
