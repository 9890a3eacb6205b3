"""``privsynth expert constants|release|train``: expert-level DP offline RL (see docs/expert_svt.md)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release) of `privsynth method run expert-svt`
    p = hidden_parser(
        subparsers, "expert", "method run expert-svt (data: method data expert-svt ID)",
        description="Expert-level differential privacy for offline RL (Sharma, Vinod et al., TMLR 2025): the private "
        "unit is an expert policy with all its trajectories.",
    )
    sub = p.add_subparsers(dest="expert_cmd", required=True)

    c = sub.add_parser("constants", help="Algorithm 2's constants and diagnostics for (eps1, delta1, T, L, p_min) "
                       "(a calculator on public inputs: any delta1 in (0, 1))")
    c.add_argument("--eps1", type=float, required=True)
    c.add_argument("--delta1", type=float, required=True)
    c.add_argument("-T", "--rounds", type=int, default=25, help="trajectories traversed (default: %(default)s)")
    c.add_argument("-L", "--max-len", type=int, default=200, help="longest trajectory (default: %(default)s)")
    c.add_argument("--p-min", type=float, default=0.02)
    c.add_argument("--m", type=int, default=3000, help="number of experts (for the max-consensus diagnostic)")
    c.add_argument("--n-actions", type=int, default=3)
    c.set_defaults(func=run_constants)

    for name, helptext in (("release", "build an expert pool and run the stable-prefix release (Alg. 2)"),
                           ("train", "release + train (stable_only | selective | dpsgd | nonprivate) and evaluate")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--env", choices=["acrobot", "cartpole"], default="acrobot")
        s.add_argument("--epsilon", type=float, default=10.0, help="total ε (default: %(default)s)")
        s.add_argument("--delta", type=float, default=None,
                       help="total δ, must be below 1/m for m experts (default: 1e-6, a public constant: m is private; the paper used 1/m)")
        s.add_argument("--split", choices=["paper", "split", "stable", "dpsgd"], default="paper",
                       help="ε/δ split between release and DP-SGD (default: the paper's rule)")
        s.add_argument("-T", "--rounds", type=int, default=25)
        s.add_argument("--per-factor", type=int, default=10, help="variants per physics factor (10 → 1000 variants)")
        s.add_argument("--n-traj", type=int, default=2, help="trajectories per expert (paper: 20)")
        s.add_argument("--sampler", choices=["expert", "trajectory"], default="expert",
                       help="expert: the analysed A1 (default); trajectory: the paper's reshuffle (approximate)")
        s.add_argument("--max-len", type=int, default=None,
                       help="public horizon cap L of the release (default: the environment's data horizon)")
        s.add_argument("--seed", type=int, default=0, help="non-private randomness (expert pool, init, coins); "
                       "privacy noise always comes from OS entropy")
        s.add_argument("--out", default=None, help="folder for the result JSON and ledger")
        if name == "train":
            s.add_argument("--method", choices=["stable_only", "selective", "dpsgd", "nonprivate"], default="selective")
            s.add_argument("--algo", choices=["cql", "bcq"], default="cql")
            s.add_argument("--p", type=float, default=0.8, help="noisy-step probability for selective")
            s.add_argument("--steps", type=int, default=1000)
            s.add_argument("--batch-size", type=int, default=128)
            s.add_argument("--lr", type=float, default=1e-3)
            s.add_argument("--accountant", choices=["rdp", "pld", "prv"], default="rdp")
            s.add_argument("--quiet", action="store_true")
        s.set_defaults(func=run_release if name == "release" else run_train)


def run_constants(args: argparse.Namespace) -> int:
    from privsynth.methods.expert_svt import svt_constants

    c = svt_constants(args.eps1, args.delta1, args.rounds, args.max_len, args.p_min)
    out = c.to_dict()
    out["max_count"] = args.m * (1 - (args.n_actions - 1) * args.p_min)
    out["max_consensus_prefix"] = c.max_consensus_length(args.m, args.n_actions)
    print(json.dumps(out, indent=2))
    return 0


def _release(args):
    from privsynth.methods.expert_envs import ExpertPoolConfig, make_expert_pool
    from privsynth.methods.expert_svt import (DataReleaseConfig, budget_split, check_expert_delta, data_release,
                                              PUBLIC_DEFAULT_DELTA)

    experts, data = make_expert_pool(ExpertPoolConfig(env=args.env, per_factor=args.per_factor,
                                                      n_traj_per_expert=args.n_traj, init_sd=0.2, seed=args.seed))
    # δ < 1/m (m experts = privacy units), checked before the release touches the data; the paper's 1/m is refused
    delta = args.delta if args.delta is not None else PUBLIC_DEFAULT_DELTA  # a constant: m is private
    check_expert_delta(delta, data.n_experts, f"privsynth expert {args.expert_cmd} --delta")
    split = "dpsgd" if getattr(args, "method", None) == "dpsgd" else args.split
    if getattr(args, "method", None) == "stable_only":
        split = "stable"
    e1, d1, e2, d2 = budget_split(args.env, args.epsilon, delta, split)
    rcfg = DataReleaseConfig(e1, d1, args.rounds, sampler=args.sampler, max_len=args.max_len)
    if getattr(args, "func", None) is run_release:
        return experts, data, rcfg, (e1, d1, e2, d2)
    rel = data_release(data, experts, rcfg, keep_trace=False)
    return experts, data, rel, (e1, d1, e2, d2)


def _write(args, summary: dict, ledger) -> None:
    """Print the summary; with ``--out`` write it and the ledger through the release guard (budget: ``--epsilon``),
    so a non-private run (ε = ∞) or an empty ledger is refused and nothing is written."""
    print(json.dumps(summary, indent=2))
    if args.out:
        from privsynth.privacy.guard import guarded_write

        def write(tmp: Path) -> None:
            tmp.mkdir()
            (tmp / "result.json").write_text(json.dumps(summary, indent=2))
            (tmp / "ledger.json").write_text(ledger.to_json())

        guarded_write(Path(args.out), write, ledger, args.epsilon, ledger.delta)


def run_release(args: argparse.Namespace) -> int:
    """The stable-prefix release: D_stable, the summary and the ledger, written through the release guard."""
    import numpy as np

    from privsynth.methods.expert_svt import release_outputs
    from privsynth.privacy.guard import guarded_write

    experts, data, rcfg, (e1, d1, e2, d2) = _release(args)
    out = release_outputs(data, experts, rcfg, env=args.env)
    print(json.dumps(out["result"], indent=2))
    if args.out:
        def write(tmp: Path) -> None:
            tmp.mkdir()
            (tmp / "result.json").write_text(json.dumps(out["result"], indent=2))
            (tmp / "ledger.json").write_text(out["ledger"].to_json())
            if out["result"]["stable_transitions"]:
                np.savez_compressed(tmp / "d_stable.npz", **out["d_stable"])

        guarded_write(Path(args.out), write, out["ledger"], args.epsilon, out["ledger"].delta)
    return 0


def run_train(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from privsynth.methods.discrete_learners import LearnerConfig
    from privsynth.methods.expert_dpsgd import SelectiveConfig, selective_dpsgd
    from privsynth.methods.expert_envs import default_env_returns, get_spec
    from privsynth.methods.expert_svt import ReleaseResult

    if getattr(args, "torch_threads", None) is None:  # else the global --threads decides
        torch.set_num_threads(1)
    _, data, rel, (e1, d1, e2, d2) = _release(args)
    p = {"stable_only": 0.0, "dpsgd": 1.0, "nonprivate": 0.0}.get(args.method, args.p)
    if args.method == "nonprivate":  # raw data as "stable": nothing is DP, ε = ∞ and the guard refuses the ledger
        rel = ReleaseResult(None, np.arange(len(data)), np.zeros(0, np.int64), private=False)
    cfg = SelectiveConfig(steps=args.steps, batch_size=args.batch_size, p=p, eps2=e2, delta2=d2,
                          accountant=args.accountant, seed=args.seed)
    res = selective_dpsgd(data, rel, LearnerConfig(algo=args.algo, lr=args.lr), cfg,
                          n_actions=get_spec(args.env).n_actions, progress=not args.quiet)
    rets = default_env_returns(args.env, lambda o: res.model.act(torch.as_tensor(o)).numpy(), 10, seed=10_000 + args.seed)
    summary = dict(env=args.env, method=args.method, algo=args.algo, epsilon=args.epsilon, eps1=e1, eps2=e2,
                   stable_transitions=len(rel.stable_idx), noisy_steps=res.noisy_steps, stable_steps=res.stable_steps,
                   noise_multiplier=res.noise_multiplier, eps2_strict=res.eps2_strict, eps2_paper=res.eps2_paper,
                   ledger_epsilon=res.epsilon, ledger_delta=res.ledger.delta,
                   return_mean=float(rets.mean()), return_std=float(rets.std()), seconds=round(res.seconds, 1))
    if not res.ledger.private:
        summary["not_dp"] = "NOT DP: epsilon is infinite; this result is for benchmarking and cannot be released"
    _write(args, summary, res.ledger)
    return 0
