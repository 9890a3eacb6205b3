"""A DP behaviour policy that relabels a release's actions (issue 37: the part of a release DP noise costs most).

The transfer study (docs/transfer.md, fourth round) found that a DP diffusion release teaches the real state → action
map worst of all it carries: policy R² 0.38 / 0.46 (Walker2d / Hopper, ε = 10) against 0.56 / 0.59 without DP, and
no simulator repair touches it. A regression of the action on the state is a far smaller problem than a joint
density of the whole row, and DP-SGD learns it well from the same 20k rows (a 256 × 2 MLP at ε = 1: R² 0.67 on
held-out real states, ``scripts/policy_probe.py r2``). So a share of ε buys a **DP behaviour-cloning policy** π̃(s),
and the release's actions are relabelled with it before the simulator repair recomputes s′, reward and flag from (s, ã):

* ``replace``: ã = π̃(s);
* ``residual``: ã = π̃(s) + (a − π̂(s)), where π̂ is the same network fitted without privacy on the release's own
  rows (a function of the DP output, post-processing): the row keeps its spread around the release's policy, and
  its centre moves to the DP policy's.

**Privacy.** π̃ is trained by the privacy core's DP-SGD (:func:`privsynth.privacy.dpsgd.dp_train`: Poisson sampling,
per-transition clipping, Gaussian noise, a ledger event). It starts from π̂ (free) and normalises states with the
release's mean and standard deviation (free), so it reads the sensitive set only inside the mechanism. The event
composes with the release's other events on its ledger (by the ledger's accountant). Transition unit only: a
trajectory unit would clip each trajectory's summed gradient, which this module does not do.

Own code rather than a library: the regression is twenty lines of torch; what matters, the DP-SGD and its
accounting, is the privacy core's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError

__all__ = ["DPPolicyConfig", "PolicyNet", "fit_plain", "fit_dp", "relabel_actions"]


@dataclass
class DPPolicyConfig:
    """The DP behaviour policy's schedule, probed on the Walker2d transfer proxy (``scripts/policy_probe.py``); the
    share of ε it gets is the release's decision (:data:`privsynth.release.relabel.POLICY_SHARE`)."""

    epochs: float = 50.0  # DP epochs (expected passes; steps = epochs / q)
    batch_size: int = 1024  # expected transitions per DP step
    lr: float = 1e-3
    max_grad_norm: float = 1.0
    width: int = 256
    depth: int = 2
    warm_epochs: int = 10  # plain epochs on the release's own rows first (π̂; post-processing)
    mode: Literal["replace", "residual"] = "residual"

    def validate(self) -> None:
        if self.mode not in ("replace", "residual"):
            raise InvalidData(f"policy relabel mode must be 'replace' or 'residual', got {self.mode!r}")


class PolicyNet(nn.Module):
    """s ↦ a: an MLP on standardised states, tanh-squashed into the action box [low, high]."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, low: np.ndarray, high: np.ndarray, *,
                 width: int = 256, depth: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = len(mean)
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        layers.append(nn.Linear(d, len(low)))
        self.net = nn.Sequential(*layers)
        for name, v in (("mean", mean), ("std", std), ("low", low), ("high", high)):
            self.register_buffer(name, torch.as_tensor(np.asarray(v, dtype=np.float32)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        u = torch.tanh(self.net((obs - self.mean) / self.std))
        return self.low + (u + 1.0) * 0.5 * (self.high - self.low)

    @torch.no_grad()
    def act(self, obs: np.ndarray, batch: int = 65_536) -> np.ndarray:
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        return np.concatenate([self(x[i:i + batch]).numpy() for i in range(0, len(x), batch)]) if len(x) else \
            np.zeros((0, len(self.low)), np.float32)


class _SquaredError(nn.Module):
    """Per-transition loss ‖π(s) − a‖², one value per privacy unit (what DP-SGD clips)."""

    def __init__(self, policy: PolicyNet) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return ((self.policy(obs) - act) ** 2).sum(1)


def _box(rows: OfflineDataset) -> tuple[np.ndarray, np.ndarray]:
    """The action box: the dataset's recorded environment facts, else its environment's action space (public)."""
    info = rows.info
    if info.action_low is not None and info.action_high is not None:
        return np.asarray(info.action_low, np.float32), np.asarray(info.action_high, np.float32)
    if info.env_id:
        from privsynth.data.env_adapters import adapter_for

        adapter = adapter_for(info, rows.observations[:1])
        try:
            space = getattr(getattr(adapter, "env", None), "action_space", None)
            if space is not None and hasattr(space, "low"):
                return np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
        finally:
            adapter.close()
    raise InvalidData("relabelling actions needs the environment's action box (info.action_low / action_high, or "
                      "an env_id whose action space is a box)")


def fit_plain(rows: OfflineDataset, cfg: DPPolicyConfig, *, seed: int = 0) -> PolicyNet:
    """π̂: the policy network fitted without privacy on a release's own rows (refuses sensitive data)."""
    if rows.info.sensitive:
        raise PrivacyError("fit_plain fits a released (or public) dataset only; use fit_dp for sensitive data")
    low, high = _box(rows)
    obs = rows.observations.astype(np.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = PolicyNet(obs.mean(0), obs.std(0) + 1e-6, low, high, width=cfg.width, depth=cfg.depth)
    x = torch.as_tensor(obs)
    y = torch.as_tensor(np.clip(rows.actions, low, high).astype(np.float32))
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    loss_fn = _SquaredError(net)
    for _ in range(cfg.warm_epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), 256):
            j = perm[i:i + 256]
            opt.zero_grad()
            loss_fn(x[j], y[j]).mean().backward()
            opt.step()
    return net


def fit_dp(sensitive: OfflineDataset, start: PolicyNet, cfg: DPPolicyConfig, *, epsilon: float, delta: float,
           n_units_noisy: int | None = None, noise_seed: int | None = None, noise_multiplier: float | None = None,
           accountant: str = "rdp", progress: bool = False):
    """π̃: ``start`` (a copy) DP fine-tuned on the sensitive (s, a) pairs; returns (policy, DPTrainResult). σ is
    calibrated to ``epsilon`` unless ``noise_multiplier`` is given (the caller then composes the event itself)."""
    from privsynth.privacy.dpsgd import DPSGDConfig, dp_train

    import copy

    policy = copy.deepcopy(start)
    low, high = policy.low.numpy(), policy.high.numpy()
    x = torch.as_tensor(sensitive.observations.astype(np.float32))
    y = torch.as_tensor(np.clip(sensitive.actions, low, high).astype(np.float32))
    dcfg = DPSGDConfig(target_epsilon=epsilon, delta=delta, epochs=cfg.epochs, batch_size=cfg.batch_size,
                       max_grad_norm=cfg.max_grad_norm, unit="transition", accountant=accountant,
                       grad_sample_mode="auto", noise_seed=noise_seed, noise_multiplier=noise_multiplier)
    res = dp_train(_SquaredError(policy), (x, y), dcfg, make_optimizer=lambda ps: torch.optim.Adam(ps, lr=cfg.lr),
                   progress=progress, description="DP-SGD behaviour policy (action relabel)",
                   n_units_noisy=n_units_noisy)
    return policy, res


def relabel_actions(rows: OfflineDataset, policy: PolicyNet, *, mode: str = "residual",
                    reference: PolicyNet | None = None) -> OfflineDataset:
    """The rows with their actions replaced by ``policy``'s (``replace``) or moved by ``policy − reference``
    (``residual``), clipped to the policy's action box. s′, reward and flags are left as they were: re-simulate
    them."""
    new = policy.act(rows.observations)
    if mode == "residual":
        if reference is None:
            raise InvalidData("mode 'residual' needs the reference policy fitted on the release's own rows")
        new = new + (rows.actions - reference.act(rows.observations))
    elif mode != "replace":
        raise InvalidData(f"unknown relabel mode {mode!r}")
    new = np.clip(new, policy.low.numpy(), policy.high.numpy())
    return dataclasses.replace(rows, actions=new.astype(rows.actions.dtype))
