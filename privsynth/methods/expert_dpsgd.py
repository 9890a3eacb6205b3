"""Selective DP-SGD (seed paper Algorithm 3) and expert-level DP-SGD (Algorithm 4) with strict accounting.

Each step flips a public, data-independent coin β ~ Bernoulli(p):

* β = 1 — an **expert-level DP-SGD step** on D_unst (Alg. 4 lines 3–8): every expert is sampled independently with
  probability q = b/m (Poisson over *experts*, m = number of experts), each sampled expert contributes ONE uniformly
  random transition of its own unstable data, the per-example gradient (all heads, all layers) is clipped to C, the
  sum gets N(0, σ²C²I) and is divided by the *expected* batch size b. A sampled expert with no unstable transition
  contributes a zero gradient.
* β = 0 — a plain SGD step on b transitions drawn uniformly from the released D_stable (post-processing of a DP
  release: no clipping, no noise, no cost).

p = 1 with the release skipped (ε₁ = 0, D_unst = all data) is Algorithm 4, the expert-level DP-SGD baseline.

**Accounting.** The paper accounts N steps of a Poisson-subsampled Gaussian at q = p·b/m, which is only valid if an
observer cannot tell noisy from noiseless steps (a hidden coin); with all iterates visible the coin is effectively
public. We therefore draw the whole coin sequence up front (it does not depend on the data), count the
realised noisy steps K and account **only those K steps at q = b/m** ("strict", the default and the only number that
enters the ledger). σ is calibrated so that strict ε₂ is exactly spent at K steps. The paper's number is reported as a
diagnostic (:func:`paper_epsilon`). The ledger then holds the release's (ε₁, δ₁) event and the DP-SGD event, and
composes to ε₁ + ε₂ at δ₁ + δ₂.

Why not :func:`privsynth.privacy.dpsgd.dp_train`: its step samples whole privacy units and clips each unit's summed
loss; Alg. 4 samples one transition per sampled expert, and Alg. 3 interleaves noiseless steps on another dataset
with the noisy ones. This loop reuses the project's accounting (``privsynth.privacy.accounting``) and ledger events,
and takes per-example gradients with ``torch.func.vmap(grad(...))``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from privsynth.errors import PrivacyError
from privsynth.methods.discrete_learners import DiscreteLearner, LearnerConfig, make_learner
from privsynth.methods.expert_svt import check_expert_delta
from privsynth.privacy.count import count_epsilon, noisy_unit_count
from privsynth.privacy import accounting as acc
from privsynth.privacy.ledger import Ledger, LedgerEvent
from privsynth.privacy.noise import NoiseSource

__all__ = ["SelectiveConfig", "TrainResult", "plan_coins", "strict_epsilon", "paper_epsilon", "ExpertSampler",
           "selective_dpsgd"]


@dataclass
class SelectiveConfig:
    """Stage-2 settings. Paper Table 3 (Acrobot CQL): η = 5e-4–1e-3, b = 128; C = 1 everywhere."""

    steps: int = 2000  # N training steps (paper: as many as ε₂ allows, 25k–1.4M; CPU cap)
    batch_size: int = 128  # b: expected experts per noisy step, and stable batch size
    p: float = 0.8  # probability of a noisy step (p = 0: stable only; p = 1: DP-SGD only)
    clip: float = 1.0  # C
    eps2: float = 2.5
    delta2: float = 1.0 / 30000
    noise_multiplier: float | None = None  # None: calibrate so that strict ε₂ is spent at the realised K
    accountant: str = "pld"  # paper: Google's PLD accountant
    seed: int = 0  # non-private randomness: init, the public coins, batches of the released D_stable
    noise_seed: int | None = None  # None: expert sampling and noise from OS entropy; an int replays them (NOT DP)


@dataclass
class TrainResult:
    model: DiscreteLearner
    ledger: Ledger
    noisy_steps: int
    stable_steps: int
    skipped_steps: int  # stable steps with an empty D_stable
    noise_multiplier: float | None
    eps2_strict: float
    eps2_paper: float | None
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float:
        """ε of the trained model at the ledger's δ: ∞ for a non-private run or an empty ledger."""
        if not self.ledger.events:
            return float("inf")
        return self.ledger.epsilon()


def plan_coins(steps: int, p: float, seed: int) -> np.ndarray:
    """The public coin sequence β_1..β_N (True = noisy step); data-independent, drawn before training."""
    if not 0 <= p <= 1:
        raise PrivacyError(f"p must be in [0, 1], got {p}")
    return np.random.default_rng([seed, 7]).random(steps) < p


def strict_epsilon(sigma: float, batch_size: int, m: int, noisy_steps: int, delta: float, accountant: str = "pld",
                   *, count_scale: float = 0.0) -> float:
    """ε₂ counting only the realised noisy steps, at q = b/m (conditioning on the public coin)."""
    return acc.dpsgd_epsilon(sigma, batch_size / m, noisy_steps, delta, accountant, count_scale=count_scale)


def paper_epsilon(sigma: float, batch_size: int, m: int, p: float, steps: int, delta: float, accountant: str = "pld") -> float:
    """The paper's ε₂: all N steps at q = p·b/m (valid only under a hidden coin; diagnostic)."""
    return acc.dpsgd_epsilon(sigma, p * batch_size / m, steps, delta, accountant)


class ExpertSampler:
    """Poisson sampling over experts, then one random transition of each sampled expert (Alg. 4 lines 3–4)."""

    def __init__(self, expert_of: np.ndarray, idx: np.ndarray, n_experts: int) -> None:
        order = np.argsort(expert_of[idx], kind="stable")
        self.idx = idx[order]
        self.count = np.bincount(expert_of[self.idx], minlength=n_experts)
        self.offset = np.concatenate([[0], np.cumsum(self.count)[:-1]])
        self.m = n_experts

    def sample(self, rng: np.random.Generator, q: float) -> tuple[np.ndarray, int]:
        """(transition indices of the sampled experts that have data, number of sampled experts)."""
        chosen = np.nonzero(rng.random(self.m) < q)[0]
        have = chosen[self.count[chosen] > 0]
        pick = self.offset[have] + (rng.random(len(have)) * self.count[have]).astype(np.int64)
        return self.idx[pick], len(chosen)


def _tensors(data, idx: np.ndarray) -> tuple[torch.Tensor, ...]:
    return (torch.as_tensor(data.obs[idx]), torch.as_tensor(data.actions[idx]), torch.as_tensor(data.rewards[idx]),
            torch.as_tensor(data.next_obs[idx]), torch.as_tensor(data.terminals[idx].astype(np.float32)))


def selective_dpsgd(data, release, learner_cfg: LearnerConfig, cfg: SelectiveConfig, *, n_actions: int,
                    progress: bool = False) -> TrainResult:
    """Algorithm 3 on the split of :func:`~privsynth.methods.expert_svt.data_release` (sensitive data in; the
    returned ledger accounts everything: the release event, if any, and the noisy steps).

    ``release.const is None`` means the release was skipped (ε₁ = 0); with ``cfg.p = 1`` this is Algorithm 4.
    The ledger's total δ = δ₁ + δ₂ must lie below 1/m (m experts = privacy units): refused before training otherwise.
    """
    t0 = time.time()
    m = int(data.n_experts)
    b = int(cfg.batch_size)
    if b > m:
        raise PrivacyError(f"batch size {b} exceeds the {m} experts")
    coins = plan_coins(cfg.steps, cfg.p, cfg.seed)
    K = int(coins.sum())
    if K > 0 and not (cfg.eps2 > 0 and 0 < cfg.delta2 < 1):
        raise PrivacyError("noisy steps need eps2 > 0 and 0 < delta2 < 1 (set p = 0 for stable-only training)")
    delta_total = (release.const.delta1 if release.const else 0.0) + (cfg.delta2 if K else 0.0)
    if delta_total > 0:  # 0: nothing private ran (the non-private baseline, whose ledger the guard refuses anyway)
        check_expert_delta(delta_total, m, "expert-level DP-SGD (delta1 + delta2)")
    source = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed)
    # m is private under add/remove one expert (docs/privacy.md): q comes from a Laplace count m~ of the experts,
    # 2% of eps2, composed with the noisy steps in their ledger event
    m_noisy, count_scale = m, 0.0
    if K > 0:
        eps_count = count_epsilon(cfg.eps2)
        m_noisy, _ = noisy_unit_count(m, epsilon=eps_count, unit="expert", source=source)
        count_scale = 1.0 / eps_count
        b = min(b, m_noisy)
    q = b / m_noisy
    sigma = cfg.noise_multiplier
    if K > 0 and sigma is None:
        sigma = acc.calibrate_noise_multiplier(cfg.eps2, cfg.delta2, q, K, cfg.accountant, count_scale=count_scale)
    eps_strict = (strict_epsilon(sigma, b, m_noisy, K, cfg.delta2, cfg.accountant, count_scale=count_scale)
                  if K else 0.0)
    eps_paper = paper_epsilon(sigma, b, m_noisy, cfg.p, cfg.steps, cfg.delta2, cfg.accountant) if K else None
    if K and eps_strict > cfg.eps2 * (1 + 1e-6):
        raise PrivacyError(f"noise multiplier {sigma} spends eps2 = {eps_strict:.4g} > {cfg.eps2} over {K} noisy steps")

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng([cfg.seed, 11])  # batches of the released D_stable (post-processing)
    mask_rng = source.numpy_rng()  # Poisson sampling of experts and their transition: privacy randomness
    net = make_learner(data.obs.shape[1], n_actions, learner_cfg)
    params = net.trainable()
    opt = torch.optim.Adam(params.values(), lr=learner_cfg.lr)
    sampler = ExpertSampler(data.expert, np.asarray(release.unstable_idx), m) if K else None
    stable_idx = np.asarray(release.stable_idx)
    noise_gen = source.torch_generator()

    def one_loss(p_, s, oh, y):
        return functional_call(net, p_, (s, oh, y))

    per_example_grad = vmap(grad(one_loss), in_dims=(None, 0, 0, 0))
    n_noisy = n_stable = n_skip = 0
    it = range(cfg.steps)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="selective DP-SGD" if cfg.p < 1 else "expert-level DP-SGD")
    for step in it:
        opt.zero_grad(set_to_none=True)
        if coins[step]:
            idx, _ = sampler.sample(mask_rng, q)
            summed = {k: torch.zeros_like(v) for k, v in params.items()}
            if len(idx):
                s, a, r, s2, d = _tensors(data, idx)
                y = net.targets(r, s2, d)
                oh = torch.nn.functional.one_hot(a, n_actions).float()
                g = per_example_grad({k: v.detach() for k, v in params.items()}, s, oh, y)
                norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
                factor = (cfg.clip / (norms + 1e-6)).clamp(max=1.0)
                summed = {k: torch.einsum("b,b...->...", factor, v) for k, v in g.items()}
            for k, v in params.items():
                noise = torch.normal(0.0, sigma * cfg.clip, size=v.shape, generator=noise_gen)
                v.grad = (summed[k] + noise) / b  # divide by the EXPECTED batch size (Alg. 4 line 7)
            n_noisy += 1
        else:
            if len(stable_idx) == 0:
                n_skip += 1
                continue
            idx = stable_idx[rng.integers(0, len(stable_idx), size=b)]
            s, a, r, s2, d = _tensors(data, idx)
            net.loss(s, a, r, s2, d).mean().backward()
            n_stable += 1
        opt.step()
        net.update_target()

    if n_noisy != K:  # the ledger must describe what ran
        raise PrivacyError(f"internal: ran {n_noisy} noisy steps but planned {K}")
    ledger = Ledger(unit="expert", accountant=cfg.accountant, delta=delta_total if delta_total > 0 else 1e-12,
                    treated_as_public=["the coin sequence (data-independent)",
                                       "environment dynamics and rewards (not protected, paper Sec. 3.1)"])
    ev = release.ledger_event()
    if ev is not None:
        ledger.append(ev)
    if not getattr(release, "private", True):
        # the non-private baseline trains on the raw data: ε = ∞, and the guard refuses this ledger
        ledger.append(LedgerEvent.approx_dp("non-private training on the raw sensitive data", epsilon=float("inf"),
                                            unit="expert", noise="none"))
        ledger.notes.append("NOT DP: the model was trained on the raw sensitive data (epsilon = infinity)")
    if K:
        ledger.append(LedgerEvent.dpsgd("expert-dpsgd", noise_multiplier=sigma, sample_rate=q, steps=K,
                                        max_grad_norm=cfg.clip, unit="expert", accounting="strict",
                                        count_scale=count_scale, n_units_noisy=m_noisy,
                                        eps2=eps_strict, eps2_paper=eps_paper, total_steps=cfg.steps, p=cfg.p,
                                        noise=source.kind))
    return TrainResult(net, ledger, n_noisy, n_stable, n_skip, sigma, eps_strict, eps_paper, time.time() - t0,
                       info=dict(config=asdict(cfg), learner=asdict(learner_cfg), m_noisy=m_noisy, q=q))
