"""The kickstarting suite (the paper's Sec. 5 experiments, scaled down): train a PPO teacher once, then PPO students
with and without a (private) teacher over several seeds, and summarise learning speed.

Configurations: ``ppo`` plain student-size PPO (no teacher); ``nonprivate`` exact teacher, λ = 0 (paper
Exp. 2); ``unaware-*`` Dirichlet teacher, λ = 0; ``aware-*`` Dirichlet teacher, λ = 0.5. ``*-silent`` stops answering
once k < ``k_min`` or the query budget is spent; ``*-sampling`` keeps sampling Dir_k as k decays (the paper's literal
"k → 0" reading, which leaks teacher action samples) and does not enforce a budget (its ledger still
records every answer).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privsynth.data.envs import make_env
from privsynth.errors import PrivacyError, PrivsynthError
from privsynth.methods.kickstart.curves import smoothed_curve, steps_to_threshold
from privsynth.methods.kickstart.dirichlet import DirichletMechanism, lipschitz_upper_bound, restrict
from privsynth.methods.kickstart.offline import BCConfig, train_bc_teacher
from privsynth.methods.kickstart.ppo import KickstartedPPO, PPOConfig
from privsynth.nn import mlp
from privsynth.methods.checkpoint import load_state_dict_file
from privsynth.methods.kickstart.teacher import PrivateTeacher, TeacherConfig
from privsynth.privacy.noise import NoiseSource
from privsynth.rl.evaluate import evaluate_policy

__all__ = ["SuiteConfig", "CONFIGS", "make_env", "train_teacher", "load_teacher", "run_student", "summarise",
           "steps_to_threshold", "smoothed_curve", "teacher_from_dataset", "build_teacher"]

CONFIGS = ("ppo", "nonprivate", "unaware-sampling", "unaware-silent", "aware-sampling", "aware-silent")


@dataclass
class SuiteConfig:
    """Scaled-down protocol: Acrobot-v1 instead of AirRaid RAM, 30k student steps instead of 4M (paper Sec. 5)."""

    env_id: str = "Acrobot-v1"
    teacher_hidden: tuple[int, ...] = (64, 64)  # [PAPER]
    teacher_epochs: int = 60
    student: PPOConfig = field(default_factory=lambda: PPOConfig(hidden=(32, 32), epochs=30))
    eta: float = 0.1  # teacher floor [GUESS: not reported]
    b: float = 1e-3  # adjacency radius in raw observation units (L·b ≈ 0.01, near the paper's implied 0.015)
    delta_per_query: float = 1e-6
    k0: float = 5.0  # [PAPER]
    c: float = 0.9  # vanishing coefficient per episode [PAPER: 0.1 ... 0.9]
    k_min: float = 0.05  # silent variant: stop answering below this k [GUESS]
    eps_budget: float = 1e5  # silent variant's query budget (basic composition)
    delta_budget: float = 0.05
    lam: float = 0.5  # aware students [PAPER]
    noise_seed: int | None = None  # None: teacher noise from OS entropy; an int replays it (benchmarks only, not DP)


def train_teacher(cfg: SuiteConfig, out: Path, seed: int = 0, progress: Any = None) -> dict[str, Any]:
    """Train the (64, 64) PPO teacher, save its actor and a JSON with its Lipschitz bound and returns."""
    out.mkdir(parents=True, exist_ok=True)
    tcfg = replace(cfg.student, hidden=cfg.teacher_hidden, epochs=cfg.teacher_epochs, seed=seed)
    agent = KickstartedPPO(make_env(cfg.env_id), tcfg)
    log = agent.train(progress=progress)
    torch.save(agent.pi.state_dict(), out / "teacher.pt")
    L = lipschitz_upper_bound(agent.pi, eta=cfg.eta)
    info = {
        "env_id": cfg.env_id,
        "hidden": list(cfg.teacher_hidden),
        "epochs": cfg.teacher_epochs,
        "seed": seed,
        "lipschitz_restricted": L,
        "lipschitz_raw": lipschitz_upper_bound(agent.pi),
        "train_curve": [r.ep_return for r in log],
        "eval_return": agent.evaluate(make_env(cfg.env_id), episodes=10),
        "eval_return_restricted": _eval_restricted(agent.pi, cfg, episodes=10),
    }
    (out / "teacher.json").write_text(json.dumps(info, indent=2))
    return info


@torch.no_grad()
def _eval_restricted(pi: torch.nn.Module, cfg: SuiteConfig, episodes: int, seed: int = 20_000) -> float:
    """Return of the restricted teacher ``(1 − mη)π_T + η`` (the policy the mechanism actually perturbs)."""
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray) -> list[int]:
        p = restrict(torch.softmax(pi(torch.as_tensor(obs, dtype=torch.float32)), -1)[0].double().numpy(), cfg.eta)
        return [int(rng.choice(len(p), p=p / p.sum()))]

    return float(evaluate_policy(make_env(cfg.env_id), act, range(seed, seed + episodes)).mean())


def teacher_from_dataset(dataset_id: str, cfg: SuiteConfig, out: Path, epochs: int = 30, seed: int = 0) -> dict[str, Any]:
    """Behaviour-cloning teacher on a stored, non-sensitive dataset (e.g. a DP synthetic release), saved like
    :func:`train_teacher` so the suite's students can use it; the dataset's privacy card is kept in teacher.json."""
    from privsynth.data.minari_io import load_dataset

    ds = load_dataset(dataset_id)
    if ds.info.sensitive:  # its weights would be a non-DP release of the sensitive rows, written unguarded
        raise PrivacyError(f"refusing to clone a teacher from '{dataset_id}': it is marked sensitive; use a DP "
                           "release of it (privsynth synthesize) or public data")
    env = make_env(cfg.env_id)
    net = train_bc_teacher(ds, int(env.action_space.n), BCConfig(hidden=cfg.teacher_hidden, epochs=epochs, seed=seed))
    out.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), out / "teacher.pt")
    info = {
        "env_id": cfg.env_id, "hidden": list(cfg.teacher_hidden), "epochs": epochs, "seed": seed,
        "source": f"behaviour cloning on dataset {dataset_id}",
        "dataset_card": ds.info.privacy_card,
        "lipschitz_restricted": lipschitz_upper_bound(net, eta=cfg.eta),
        "lipschitz_raw": lipschitz_upper_bound(net),
        "eval_return": _eval_policy(net, cfg, episodes=10),
        "eval_return_restricted": _eval_restricted(net, cfg, episodes=10),
    }
    (out / "teacher.json").write_text(json.dumps(info, indent=2))
    return info


@torch.no_grad()
def _eval_policy(pi: torch.nn.Module, cfg: SuiteConfig, episodes: int, seed: int = 20_000) -> float:
    def act(obs: np.ndarray) -> list[int]:
        return [int(torch.multinomial(torch.softmax(pi(torch.as_tensor(obs, dtype=torch.float32)), -1)[0], 1))]

    return float(evaluate_policy(make_env(cfg.env_id), act, range(seed, seed + episodes)).mean())


def load_teacher(out: Path, cfg: SuiteConfig) -> tuple[torch.nn.Module, dict[str, Any]]:
    path = out / "teacher.pt"
    if not path.exists():
        raise PrivsynthError(f"no teacher at {path}; train it first")
    env = make_env(cfg.env_id)
    net = mlp(int(np.prod(env.observation_space.shape)), cfg.teacher_hidden, int(env.action_space.n), act=torch.nn.Tanh)
    net.load_state_dict(load_state_dict_file(path))  # weights_only: a checkpoint cannot run code
    net.eval()
    return net, json.loads((out / "teacher.json").read_text())


def build_teacher(name: str, net: torch.nn.Module, info: dict[str, Any], cfg: SuiteConfig, seed: int) -> PrivateTeacher | None:
    """The teacher of one suite configuration (None for plain PPO)."""
    if name == "ppo":
        return None
    if name == "nonprivate":
        return PrivateTeacher(net, None, TeacherConfig(private=False), dataset_card=info.get("dataset_card"))
    silent = name.endswith("silent")
    mech = DirichletMechanism(m=int(net[-1].out_features), L=float(info["lipschitz_restricted"]), b=cfg.b,
                              eta=cfg.eta, delta_per_query=cfg.delta_per_query)
    tc = TeacherConfig(
        k0=cfg.k0, c=cfg.c, k_min=cfg.k_min if silent else 0.0,
        eps_budget=cfg.eps_budget if silent else None, delta_budget=cfg.delta_budget if silent else None,
    )
    noise = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed + 10_000 + seed)
    return PrivateTeacher(net, mech, tc, noise=noise, dataset_card=info.get("dataset_card"))


def run_student(name: str, seed: int, cfg: SuiteConfig, out: Path) -> dict[str, Any]:
    """Train one student and write ``runs/<name>_s<seed>.json`` (curve, ledger card, config)."""
    if name not in CONFIGS:
        raise PrivsynthError(f"unknown configuration '{name}': choose one of {', '.join(CONFIGS)}")
    torch.set_num_threads(1)
    net, info = load_teacher(out, cfg)
    teacher = build_teacher(name, net, info, cfg, seed)
    lam = cfg.lam if name.startswith("aware") else 0.0
    scfg = replace(cfg.student, kick_lambda=lam, seed=seed)
    student = KickstartedPPO(make_env(cfg.env_id), scfg, teacher=teacher)
    log = student.train()
    rec: dict[str, Any] = {
        "config": name,
        "seed": seed,
        "student": student.config_dict(),
        "curve": [asdict(r) for r in log],
        "teacher_answered": teacher.answered if teacher is not None else 0,
        "teacher_asked": teacher.asked if teacher is not None else 0,
    }
    if teacher is not None and teacher.cfg.private:
        card = teacher.ledger.card()
        rec["query_ledger"] = {k: card[k] for k in ("unit", "neighbouring_relation", "epsilon", "delta", "queries",
                                                    "eps_budget", "delta_budget", "composition")}
        rec["query_ledger"]["first_event"] = card["events"][0] if card["events"] else None
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "runs" / f"{name}_s{seed}.json").write_text(json.dumps(rec, indent=1))
    return rec


# --------------------------------------------------------------------------------------------------- summaries
def summarise(out: Path, threshold: float, complete_seeds: bool = True) -> dict[str, Any]:
    """Per configuration: seeds, mean ± std over seeds of AUC (mean smoothed return), final return (last 5 epochs),
    steps to ``threshold``, teacher answers and query-ledger totals. ``complete_seeds``: keep only the seeds every
    configuration has finished, so all rows compare the same seeds."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((out / "runs").glob("*.json")):
        rec = json.loads(path.read_text())
        runs.setdefault(rec["config"], []).append(rec)
    if complete_seeds and runs:
        common = set.intersection(*({r["seed"] for r in recs} for recs in runs.values()))
        runs = {k: [r for r in v if r["seed"] in common] for k, v in runs.items()}
        runs = {k: v for k, v in runs.items() if v}
    table: dict[str, Any] = {}
    for name in [c for c in CONFIGS if c in runs]:
        recs = sorted(runs[name], key=lambda r: r["seed"])
        spe = recs[0]["student"]["steps_per_epoch"]
        curves = np.stack([smoothed_curve([e["ep_return"] for e in r["curve"]]) for r in recs])
        auc = np.nanmean(curves, axis=1)
        final = np.nanmean(curves[:, -5:], axis=1)
        stt = np.array([steps_to_threshold(c, spe, threshold) for c in curves])
        table[name] = {
            "seeds": [r["seed"] for r in recs],
            "auc_mean": float(auc.mean()), "auc_std": float(auc.std(ddof=1)) if len(auc) > 1 else 0.0,
            "final_mean": float(final.mean()), "final_std": float(final.std(ddof=1)) if len(final) > 1 else 0.0,
            "auc_per_seed": auc.tolist(), "final_per_seed": final.tolist(),
            "steps_to_threshold": stt.tolist(),
            "answered_mean": float(np.mean([r["teacher_answered"] for r in recs])),
            "query_eps_mean": float(np.mean([r["query_ledger"]["epsilon"] for r in recs])) if "query_ledger" in recs[0] else 0.0,
            "query_delta_mean": float(np.mean([r["query_ledger"]["delta"] for r in recs])) if "query_ledger" in recs[0] else 0.0,
            "curves": curves.tolist(),
            "steps_per_epoch": spe,
        }
    return table
