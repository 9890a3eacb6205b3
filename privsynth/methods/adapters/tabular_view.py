"""The tabular view DP-APVI and DP-VAPVI need, built from public facts only (docs/methods.md).

The public environment is named in the config (a tabular MDP: gridworld or random instance; or the linear MDP of
the DP-VAPVI paper's simulation, section 5); its state and action sets, horizon H, reward table and feature map are
public. The sensitive dataset must already be in that environment's layout (observation ``[state index, step h]``,
action ``[action index]``, every episode exactly H steps, as :meth:`Trajectories.to_offline_dataset` writes it):
the view only checks the layout against the public spec and reshapes, it computes no statistic of the data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.methods.tabular_mdp import Trajectories
from privsynth.privacy.accounting import zcdp_rho_for

__all__ = ["TabularPolicy", "trajectories_view", "rho_for_budget"]


@dataclass
class TabularPolicy:
    """A deterministic non-stationary policy ``pi[h, s]``; ``act([state, h])`` (or a batch of them) -> action.
    ``Q[h, s, a]`` is the pessimistic Q it is greedy in (a DP output too)."""

    pi: np.ndarray
    Q: np.ndarray | None = None

    def act(self, obs: Any) -> np.ndarray:
        o = np.asarray(obs)
        s, h = o[..., 0].astype(np.int64), o[..., 1].astype(np.int64)
        H, S = self.pi.shape
        if (s < 0).any() or (s >= S).any() or (h < 0).any() or (h >= H).any():
            raise InvalidData(f"observation outside the policy's table (H={H}, S={S})")
        return self.pi[h, s]


def trajectories_view(ds: OfflineDataset, H: int, S: int, A: int, method: str) -> Trajectories:
    """``ds`` as K fixed-horizon trajectories of the public (H, S, A) environment, or one line saying why not."""
    if ds.obs_dim != 2 or ds.act_dim != 1:
        raise InvalidData(f"{method} reads observations [state index, step h] and actions [action index]; dataset "
                          f"'{ds.info.name}' has {ds.obs_dim}-d observations and {ds.act_dim}-d actions")
    traj = Trajectories.from_offline_dataset(ds)
    if traj.horizon != H:
        raise InvalidData(f"{method}: the public environment has horizon H={H} but the dataset's episodes have "
                          f"{traj.horizon} steps")
    if traj.states.min() < 0 or traj.states.max() >= S or traj.actions.min() < 0 or traj.actions.max() >= A:
        raise InvalidData(f"{method}: the dataset holds states or actions outside the public environment "
                          f"(S={S}, A={A})")
    steps = ds.observations[:, 1].reshape(traj.n_episodes, H)
    if not np.array_equal(steps, np.broadcast_to(np.arange(H), steps.shape)):
        raise InvalidData(f"{method}: the second observation column must be the step index 0..H-1 of every episode")
    return traj


def rho_for_budget(rho: float | None, epsilon: float, delta: float) -> float:
    """The zCDP budget of a run: ``rho`` if given, else the largest ρ whose ε at δ (the ledger's conversion) fits
    ``epsilon``."""
    return float(rho) if rho is not None else zcdp_rho_for(epsilon, delta)
