"""``privsynth primorl data|train|generate|consume``: PriMORL (trajectory-level DP model-based offline RL).

Logic lives in :mod:`privsynth.methods.primorl`; see docs/primorl.md."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release) of `privsynth method`
    p = hidden_parser(subparsers, "primorl", "method run primorl (data: method data primorl ID)")
    sub = p.add_subparsers(dest="primorl_cmd", metavar="COMMAND")
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])

    d = sub.add_parser("data", help="write a sensitive Pendulum-v1 dataset from the noisy scripted behaviour mixture")
    d.add_argument("dataset_id")
    d.add_argument("--episodes", type=int, default=3000, help="number of trajectories K (paper: ~30k)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--overwrite", action="store_true")
    d.set_defaults(func=_data)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--epsilon", type=float, default=5.0, help="target ε at δ of the model training (Alg. 1)")
        q.add_argument("--no-privacy", action="store_true", help="z = 0 (the paper's NO PRIVACY ablation; nothing can be released)")
        q.add_argument("--delta", type=float, default=1e-5)
        q.add_argument("--expected-batch", type=float, default=30.0, help="qK, expected trajectories per round")
        q.add_argument("--rounds", type=int, default=700, help="T")
        q.add_argument("--clip-norm", type=float, default=0.3)
        q.add_argument("--strategy", default="per_layer", choices=["per_layer", "flat"])
        q.add_argument("--penalty", default="mpd", choices=["mpd", "ma"])
        q.add_argument("--lam", type=float, default=2.0)
        q.add_argument("--sac-epochs", type=int, default=40)
        q.add_argument("--sac-steps", type=int, default=250)
        q.add_argument("--eval-episodes", type=int, default=5, help="true-env episodes per SAC epoch (reporting only)")
        q.add_argument("--public", choices=["env", "split"], default="env",
                       help="public data: random-policy rollouts of the public simulator (default) or the paper's 1%% "
                       "split of the sensitive data (then NOT protected; the card says so)")
        q.add_argument("--seed", type=int, default=0, help="non-private randomness only (init, minibatch order, "
                       "sampling from the released model); privacy noise always comes from OS entropy")

    t = sub.add_parser("train", help="train the private ensemble and the SAC policy on a sensitive Minari dataset")
    t.add_argument("dataset_id")
    t.add_argument("--out", type=Path, required=True, help="directory for model.pt, policy.pt, history and the privacy card")
    t.add_argument("--epsilon-budget", type=float, required=True, help="refuse to write if ε at δ exceeds this")
    common(t)
    t.set_defaults(func=_train)

    g = sub.add_parser("generate", help="release rollouts of the private model as a synthetic Minari dataset")
    g.add_argument("dataset_id", help="sensitive Minari dataset (ignored with --from)")
    g.add_argument("synthetic_id", help="Minari id to write, e.g. privsynth/pendulum/primorl-eps5-v0")
    g.add_argument("--from", dest="from_dir", type=Path, default=None, help="reuse a directory written by `primorl train`")
    g.add_argument("--episodes", type=int, default=1000, help="synthetic trajectories")
    g.add_argument("--horizon", type=int, default=200)
    g.add_argument("--epsilon-budget", type=float, required=True)
    g.add_argument("--overwrite", action="store_true")
    common(g)
    g.set_defaults(func=_generate)

    c = sub.add_parser("consume", help="PriMORL's policy stage on a DP synthetic dataset (post-processing)")
    c.add_argument("synthetic_id")
    c.add_argument("--out", type=Path, default=None, help="write history.json here")
    c.add_argument("--model-steps", type=int, default=3000)
    common(c)
    c.set_defaults(func=_consume)


def _config(args: argparse.Namespace):
    from privsynth.methods.primorl.dynamics import TDPConfig
    from privsynth.methods.primorl.pessimistic_mdp import PessimismConfig
    from privsynth.methods.primorl.pipeline import PriMORLConfig
    from privsynth.methods.primorl.sac import SACConfig

    cfg = PriMORLConfig(seed=args.seed, eval_episodes=args.eval_episodes, pessimism=PessimismConfig(args.penalty, args.lam),
                        sac=SACConfig(epochs=args.sac_epochs, steps_per_epoch=args.sac_steps),
                        public_source=getattr(args, "public", "env"))
    # q = qK / K~ is set inside the run from a DP count K~ of the training trajectories (K itself is private)
    cfg.tdp = TDPConfig(expected_batch=args.expected_batch, rounds=args.rounds, clip_norm=args.clip_norm, strategy=args.strategy,
                        delta=args.delta, noise_multiplier=0.0 if args.no_privacy else None,
                        target_epsilon=None if args.no_privacy else args.epsilon)
    return cfg


def _data(args: argparse.Namespace) -> int:
    from privsynth.data.minari_io import write_dataset
    from privsynth.methods.primorl.data import PendulumDataConfig, make_pendulum_dataset

    ds = make_pendulum_dataset(PendulumDataConfig(episodes=args.episodes, seed=args.seed), name=args.dataset_id)
    path = write_dataset(ds, args.dataset_id, overwrite=args.overwrite)
    print(f"wrote {ds.n_episodes} sensitive Pendulum-v1 trajectories to {path}")
    return 0


def _sensitive(args: argparse.Namespace):
    from privsynth.data.minari_io import load_dataset

    ds = load_dataset(args.dataset_id).mark_sensitive()
    return ds, _config(args)


def _train(args: argparse.Namespace) -> int:
    import torch

    from privsynth.errors import PrivacyError
    from privsynth.methods.primorl.pipeline import train_outputs
    from privsynth.privacy.guard import guarded_write

    ds, cfg = _sensitive(args)
    out = train_outputs(ds, cfg, dataset_id=args.dataset_id, progress=True)
    if out["ledger"] is None:
        raise PrivacyError("a run without noise (--no-privacy) has no finite epsilon and cannot be released")

    def write(tmp: Path) -> None:
        tmp.mkdir()
        torch.save(out["model"], tmp / "model.pt")
        torch.save(out["policy"], tmp / "policy.pt")
        (tmp / "config.json").write_text(json.dumps(out["config"], indent=1, default=str))
        (tmp / "history.json").write_text(json.dumps(out["history"], indent=1))

    guarded_write(args.out, write, out["ledger"], args.epsilon_budget)
    run = out["run"]
    print(f"epsilon {run.epsilon:.3f} at delta {cfg.tdp.delta:g}; final true-env return {run.sac.final_return():.1f}; "
          f"wrote {args.out}")
    return 0


def _read_run_config(path: Path) -> dict:
    """The ``config.json`` of a run directory, checked part by part: someone else's file, so a damaged one is one
    :class:`InvalidData` line naming it."""
    from privsynth.data.safe_files import read_json_object
    from privsynth.errors import InvalidData

    file = path / "config.json"
    if not file.is_file():
        raise InvalidData(f"{path} holds no config.json; give a directory written by `privsynth primorl train`")
    conf = read_json_object(file)
    for key in ("obs_dim", "act_dim"):
        value = conf.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise InvalidData(f"{file}: '{key}' must be a positive whole number, got {value!r:.60}")
    for key in ("ensemble", "pessimism", "sac", "env"):
        if not isinstance(conf.get(key), dict):
            raise InvalidData(f"{file}: '{key}' is missing or not a mapping of settings")
    return conf


def _load_run(path: Path):
    from privsynth.config_io import config_from_dict
    from privsynth.data.dataset import DatasetInfo
    from privsynth.data.safe_files import read_text
    from privsynth.errors import InvalidData, PrivsynthError
    from privsynth.methods.checkpoint import load_state_dict_file
    from privsynth.methods.primorl.dynamics import EnsembleConfig, GaussianEnsemble
    from privsynth.methods.primorl.pessimistic_mdp import PessimismConfig, PessimisticMDP
    from privsynth.methods.primorl.pipeline import public_env_info
    from privsynth.methods.primorl.sac import SACConfig, SACPolicy
    from privsynth.privacy.guard import LEDGER_FILE
    from privsynth.privacy.ledger import Ledger
    from privsynth.synth.base import check_weights_fit

    conf = _read_run_config(path)
    file, obs_dim, act_dim = path / "config.json", conf["obs_dim"], conf["act_dim"]
    try:
        ens_cfg = config_from_dict(EnsembleConfig, conf["ensemble"], where="ensemble")
        pessimism = config_from_dict(PessimismConfig, conf["pessimism"], where="pessimism")
        hidden = config_from_dict(SACConfig, conf["sac"], where="sac").hidden
        env = DatasetInfo.from_dict(conf["env"])
    except InvalidData as exc:
        raise InvalidData(f"{file}: {exc}") from None
    # the weights must be those of the networks the settings make, checked on the meta device before allocating
    model_state = load_state_dict_file(path / "model.pt")
    check_weights_fit(lambda: {"model": GaussianEnsemble(obs_dim, act_dim, ens_cfg)}, {"model": model_state},
                      f"{path / 'model.pt'} does not fit {file}", conf["ensemble"])
    model = GaussianEnsemble(obs_dim, act_dim, ens_cfg)
    model.load_state_dict(model_state)
    info = public_env_info(env)
    try:
        mdp = PessimisticMDP.for_env(model, info, pessimism)
    except PrivsynthError:
        raise
    except (AttributeError, TypeError, ValueError, RuntimeError) as exc:  # a discrete or odd space: not a PriMORL env
        raise InvalidData(f"{file}: environment '{info.env_id}' does not fit a PriMORL run ({type(exc).__name__})") \
            from None
    if tuple(mdp.obs_low.shape) != (obs_dim,) or tuple(mdp.act_low.shape) != (act_dim,):
        raise InvalidData(f"{file}: obs/action dims {obs_dim}/{act_dim} are not those of environment "
                          f"'{info.env_id}' ({tuple(mdp.obs_low.shape)}/{tuple(mdp.act_low.shape)})")
    policy_state = load_state_dict_file(path / "policy.pt")
    make_policy = lambda: SACPolicy(obs_dim, act_dim, mdp.act_low, mdp.act_high, hidden)  # noqa: E731
    check_weights_fit(lambda: {"policy": make_policy()}, {"policy": policy_state},
                      f"{path / 'policy.pt'} does not fit {file}", conf["sac"])
    policy = make_policy()
    policy.load_state_dict(policy_state)
    ledger_file = path / LEDGER_FILE
    if not ledger_file.is_file():
        raise InvalidData(f"{path} holds no {LEDGER_FILE}; give a directory written by `privsynth primorl train`")
    try:
        ledger = Ledger.from_json(read_text(ledger_file))
    except InvalidData as exc:
        raise InvalidData(f"{ledger_file}: {exc}") from None
    return info, mdp, policy, ledger


def _generate(args: argparse.Namespace) -> int:
    from privsynth.errors import PrivacyError
    from privsynth.methods.primorl.pipeline import generate_outputs, generate_trajectories, release_synthetic

    if args.from_dir is not None:
        info, mdp, policy, ledger = _load_run(args.from_dir)
        syn = generate_trajectories(mdp, [None, policy], episodes=args.episodes, horizon=args.horizon, info=info,
                                    seed=args.seed)
    else:
        ds, cfg = _sensitive(args)
        syn, ledger = generate_outputs(ds, cfg, synthetic_id=args.synthetic_id, episodes=args.episodes,
                                       horizon=args.horizon, progress=True)
    if ledger is None:
        raise PrivacyError("a run without noise (--no-privacy) cannot be released")
    path = release_synthetic(syn, ledger, args.synthetic_id, epsilon_budget=args.epsilon_budget, overwrite=args.overwrite)
    print(f"released {syn.n_episodes} synthetic trajectories at epsilon {ledger.epsilon():.3f} to {path}")
    return 0


def _consume(args: argparse.Namespace) -> int:
    from privsynth.data.minari_io import load_dataset
    from privsynth.methods.primorl.pipeline import run_on_synthetic

    syn = load_dataset(args.synthetic_id)
    cfg = _config(args)
    cfg = dataclasses.replace(cfg, tdp=dataclasses.replace(cfg.tdp, noise_multiplier=0.0, target_epsilon=None))
    run = run_on_synthetic(syn, cfg, model_steps=args.model_steps, progress=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "history.json").write_text(json.dumps(run.sac.history, indent=1))
    print(f"epsilon (inherited from the synthetic data) {run.epsilon:.3f}; final true-env return {run.sac.final_return():.1f}")
    return 0
