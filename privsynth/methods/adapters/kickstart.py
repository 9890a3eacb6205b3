"""Privacy-preserving kickstarting behind the method protocol (Gohari et al. 2021; docs/kickstarting.md).

The route of :mod:`privsynth.methods.kickstart.offline` on a sensitive dataset, each step an existing entry point:

1. a registered DP synthesizer (:mod:`privsynth.synth.registry`, ``privsyn`` by default) is pre-trained on public
   uniform-random rollouts of the dataset's environment and fitted on the sensitive data at (ε, δ); its ledger is
   the result's ledger (the only access to the sensitive data);
2. a behaviour-cloning teacher (:func:`~privsynth.methods.kickstart.offline.train_bc_teacher`) on the synthetic
   release (post-processing);
3. a PPO student kickstarted by that teacher answering through the Dirichlet mechanism
   (:func:`~privsynth.methods.kickstart.experiments.build_teacher`, ``aware-silent`` by default).

The teacher's query ledger protects a different unit (one student query observation) and is never added to the
dataset ledger: its totals are in the card (``query_ledger``) and the metrics (``query_epsilon``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from privsynth.data.dataset import OfflineDataset, environment_facts
from privsynth.errors import InvalidData
from privsynth.methods.kickstart.dirichlet import lipschitz_upper_bound
from privsynth.methods.kickstart.experiments import CONFIGS, SuiteConfig, build_teacher, make_env
from privsynth.methods.kickstart.offline import BCConfig, collect_dataset, train_bc_teacher
from privsynth.methods.kickstart.ppo import KickstartedPPO
from privsynth.methods.protocol import MethodAdapter, MethodResult, finish

__all__ = ["KickstartMethodConfig", "KickstartMethod", "example_dataset", "public_rollouts"]


@dataclass
class KickstartMethodConfig:
    """Defaults: the scaled-down Acrobot protocol of :class:`SuiteConfig` (paper Sec. 5 values where given)."""

    epsilon: float = 10.0  # dataset-level budget of the synthetic release the teacher learns from
    delta: float = 1e-5
    synthesizer: str = "privsyn"  # any registered transition-unit synthesizer
    synthesizer_preset: str = "cpu"
    n_synthetic: int = 20_000  # synthetic transitions the teacher is cloned from
    public_episodes: int = 20  # uniform-random rollouts of the public environment (synthesizer pre-training)
    variant: str = "aware-silent"  # a configuration of the kickstarting suite (ppo, nonprivate, aware-*, unaware-*)
    kick: SuiteConfig = field(default_factory=SuiteConfig)  # teacher mechanism, budget and PPO student (kick.student)
    bc_epochs: int = 30
    eval_episodes: int = 10
    seed: int = 0  # non-private: student, teacher cloning, public rollouts, sampling
    noise_seed: int | None = None  # None: synthesizer and teacher noise from OS entropy; an int replays it (NOT DP)


class _StudentPolicy:
    def __init__(self, pi: torch.nn.Module) -> None:
        self.pi = pi

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        o = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        return self.pi(o.reshape(-1, o.shape[-1])).argmax(-1).numpy().reshape(o.shape[:-1])


@torch.no_grad()
def _greedy_return(net: torch.nn.Module, env_id: str, episodes: int, seed: int, max_steps: int) -> float:
    """Mean return of the greedy cloned teacher (reporting: is the DP release good enough to teach?)."""
    env, out = make_env(env_id), []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done, steps = 0.0, False, 0
        while not done and steps < max_steps:
            obs, r, term, trunc, _ = env.step(int(net(torch.as_tensor(obs, dtype=torch.float32)[None]).argmax()))
            total, done, steps = total + float(r), term or trunc, steps + 1
        out.append(total)
    return float(np.mean(out))


def public_rollouts(env_id: str, episodes: int, seed: int) -> OfflineDataset:
    """Public data: uniform-random rollouts of the environment (no private information)."""
    uniform = lambda x: torch.zeros(x.shape[0], int(make_env(env_id).action_space.n))  # noqa: E731
    return collect_dataset(make_env(env_id), uniform, episodes, seed=seed, env_id=env_id, sensitive=False,
                           name=f"{env_id}-uniform-random")


class KickstartMethod(MethodAdapter):
    name = "kickstart"
    config_class = KickstartMethodConfig

    def _run(self, sensitive: OfflineDataset, cfg: KickstartMethodConfig) -> MethodResult:
        from privsynth.synth import registry as synths

        env_id = sensitive.info.env_id or cfg.kick.env_id
        if cfg.variant not in CONFIGS:
            raise InvalidData(f"kickstart: unknown variant '{cfg.variant}': choose one of {', '.join(CONFIGS)}")
        env = make_env(env_id)
        n_actions, obs_dim = int(env.action_space.n), int(np.prod(env.observation_space.shape))
        if sensitive.obs_dim != obs_dim or sensitive.act_dim != 1:
            raise InvalidData(f"kickstart on {env_id} reads {obs_dim}-d observations and one action-index column; "
                              f"dataset '{sensitive.info.name}' has {sensitive.obs_dim} and {sensitive.act_dim}")
        synth = synths.make(cfg.synthesizer, preset=cfg.synthesizer_preset)
        if hasattr(synth.config, "noise_seed"):
            synth.config.noise_seed = cfg.noise_seed
        if hasattr(synth.config, "seed"):
            synth.config.seed = cfg.seed
        public = public_rollouts(env_id, cfg.public_episodes, seed=50_000 + cfg.seed)
        synths.fit(synth, sensitive, public=public, epsilon=cfg.epsilon, delta=cfg.delta, unit="transition")
        ledger = synth.ledger
        synthetic = synths.sample(synth, n_transitions=cfg.n_synthetic, seed=cfg.seed)
        # the sensitive set's environment facts (spec, reference scores: public) and the synthesizer's card
        synthetic.info = dataclasses.replace(synthetic.info, name=f"kickstart-{cfg.synthesizer}-synthetic",
                                             **{**environment_facts(sensitive.info), "env_id": env_id})
        net = train_bc_teacher(synthetic, n_actions, BCConfig(hidden=cfg.kick.teacher_hidden, epochs=cfg.bc_epochs,
                                                              seed=cfg.seed))
        kick = dataclasses.replace(cfg.kick, env_id=env_id, noise_seed=cfg.noise_seed)
        info = {"lipschitz_restricted": lipschitz_upper_bound(net, eta=kick.eta), "dataset_card": ledger.card()}
        teacher = build_teacher(cfg.variant, net, info, kick, cfg.seed)
        lam = kick.lam if cfg.variant.startswith("aware") else 0.0
        scfg = dataclasses.replace(kick.student, kick_lambda=lam, seed=cfg.seed)
        student = KickstartedPPO(make_env(env_id), scfg, teacher=teacher)
        log = student.train()
        metrics = {"return": student.evaluate(make_env(env_id), episodes=cfg.eval_episodes, seed=10_000 + cfg.seed),
                   "teacher_return": _greedy_return(net, env_id, cfg.eval_episodes, 10_000 + cfg.seed,
                                                    scfg.max_ep_len),
                   "train_return_last": float(log[-1].ep_return) if log else float("nan"),
                   "teacher_answered": teacher.answered if teacher is not None else 0,
                   "query_epsilon": teacher.ledger.totals()[0] if teacher is not None and teacher.cfg.private else 0.0}
        settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "noise_seed"}
        result = finish(ledger, cfg.epsilon, settings=settings, policy=_StudentPolicy(student.pi), dataset=synthetic,
                        metrics=metrics)
        if teacher is not None and teacher.cfg.private:
            result.card["query_ledger"] = teacher.ledger.card()
        return result


def example_dataset(episodes: int = 10, env_id: str = "Acrobot-v1", seed: int = 1000) -> OfflineDataset:
    """Sensitive Acrobot episodes of an energy-pumping behaviour (torque along the second joint's velocity, about
    -85 per episode when greedy; sampled from a softmax so every action occurs)."""
    def pump(x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(x.shape[0], 3)
        logits[:, 2] = 2.0 * torch.sign(x[:, 5])
        logits[:, 0] = -2.0 * torch.sign(x[:, 5])
        return logits

    return collect_dataset(make_env(env_id), pump, episodes, seed=seed, env_id=env_id, sensitive=True,
                           name=f"{env_id}-pump")
