"""The link to privsynth's datasets: a discrete-action teacher trained offline on a (DP synthetic) dataset, and
kickstarting speed as a utility measure of that dataset ([EXT]: not in the paper).

Route: real episodes of a discrete-action task (:func:`collect_dataset`, marked sensitive) -> a DP synthetic release
(e.g. ``privsynth synth`` with the transition synthesizer; its privacy card travels in ``DatasetInfo.privacy_card``)
-> :func:`train_bc_teacher` on the release -> :class:`~privsynth.methods.kickstart.teacher.PrivateTeacher` with
``dataset_card`` set. Every answer of that teacher is post-processing of the release and costs it no extra
dataset-level ε; the query ledger's per-query ε protects something else (the student's query observations) and is
shown next to the dataset card, never added to it.

:func:`train_bc_teacher` refuses data marked sensitive: behaviour cloning on the real data would be an unaccounted
use of it. Actions are stored as one float column (the action index; synthetic rows are rounded and clipped) or as
``m`` one-hot / score columns (argmax).

Plain behaviour cloning (cross-entropy, Adam) rather than an offline-RL library: the teacher only needs π(a|s), and
a 64x64 MLP trained in a few seconds is enough for the cheap tasks used here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.normalize import refuse_sensitive
from privsynth.errors import InvalidData
from privsynth.methods.kickstart.curves import steps_to_threshold
from privsynth.nn import mlp

__all__ = ["discrete_actions", "BCConfig", "train_bc_teacher", "collect_dataset", "kickstart_utility"]


def discrete_actions(dataset: OfflineDataset, n_actions: int) -> np.ndarray:
    """Integer actions in ``[0, n_actions)``: one column is rounded and clipped; ``n_actions`` columns use argmax."""
    a = dataset.actions
    if a.shape[1] == 1:
        return np.clip(np.rint(a[:, 0]), 0, n_actions - 1).astype(np.int64)
    if a.shape[1] == n_actions:
        return a.argmax(axis=1).astype(np.int64)
    raise InvalidData(f"actions have {a.shape[1]} columns; expected 1 (index) or {n_actions} (one-hot)")


@dataclass
class BCConfig:
    hidden: tuple[int, ...] = (64, 64)  # the paper's teacher size
    epochs: int = 30
    batch_size: int = 256
    lr: float = 1e-3
    seed: int = 0


def train_bc_teacher(dataset: OfflineDataset, n_actions: int, config: BCConfig | None = None) -> torch.nn.Sequential:
    """Behaviour-cloning policy ``obs -> logits`` on a non-sensitive (public or DP-released) dataset."""
    refuse_sensitive(dataset, "train a behaviour-cloning teacher")
    cfg = config or BCConfig()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    obs = torch.as_tensor(dataset.observations, dtype=torch.float32)
    act = torch.as_tensor(discrete_actions(dataset, n_actions))
    net = mlp(obs.shape[1], cfg.hidden, n_actions, act=torch.nn.Tanh)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    n = len(obs)
    for _ in range(cfg.epochs):
        perm = rng.permutation(n)
        for i in range(0, n, cfg.batch_size):
            idx = torch.as_tensor(perm[i: i + cfg.batch_size])
            loss = torch.nn.functional.cross_entropy(net(obs[idx]), act[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    return net


@torch.no_grad()
def collect_dataset(
    env: Any, policy: Callable[[torch.Tensor], torch.Tensor], episodes: int, *, seed: int = 0, env_id: str | None = None,
    sensitive: bool = True, name: str = "kickstart-source",
) -> OfflineDataset:
    """Roll out ``policy`` (logits) with sampled actions; the action index is stored as one float column."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("o", "a", "r", "o2", "term", "trunc", "ep")}
    for ep in range(episodes):
        o, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            p = torch.softmax(policy(torch.as_tensor(o, dtype=torch.float32)[None]), -1)[0].double().numpy()
            a = int(rng.choice(len(p), p=p / p.sum()))
            o2, r, term, trunc, _ = env.step(a)
            for k, v in zip(cols, (o, [a], r, o2, term, trunc, ep)):
                cols[k].append(v)
            o, done = o2, term or trunc
    return OfflineDataset(
        observations=np.asarray(cols["o"], np.float32), actions=np.asarray(cols["a"], np.float32),
        rewards=np.asarray(cols["r"], np.float32), next_observations=np.asarray(cols["o2"], np.float32),
        terminals=np.asarray(cols["term"]), timeouts=np.asarray(cols["trunc"]), episode_ids=np.asarray(cols["ep"]),
        info=DatasetInfo(name=name, env_id=env_id, sensitive=sensitive),
    )


def kickstart_utility(curves: dict[str, np.ndarray], steps_per_epoch: int, threshold: float) -> dict[str, float]:
    """Kickstarting speed as a dataset utility: median env steps for a student kickstarted by the teacher of each
    dataset (``curves[name]``: [seeds, epochs] smoothed returns) to reach ``threshold`` (inf if never)."""
    return {name: float(np.median([steps_to_threshold(c, steps_per_epoch, threshold) for c in cs]))
            for name, cs in curves.items()}
