"""TrajScore: distributional similarity of synthetic and real trajectories in a learned embedding space.

PrivORL (section VIII-C, Table XIII) describes TrajScore as BERTScore-like: MLPs pre-trained as an autoencoder embed
trajectories, and cosine similarity compares generated and real ones. The paper's code for it is gone, and the last
version paired real item i with synthetic item i and used unseeded random projections (anchors_code.md section 1.8),
so we define it here, precisely and deterministically:

1. **Windows.** A trajectory is cut into non-overlapping windows of ``window`` consecutive transitions (default 32, the
   PrivORL-j fragment horizon); each row is ``state | action | reward | next state`` (terminal excluded, as in the
   tabular scores). Only full windows inside one episode count, so data without episodes of at least ``window``
   steps (independent synthetic transitions) has no TrajScore.
2. **Encoder.** Rows are z-scored with statistics of the **public** data (:meth:`Normalizer.fit_public`, which
   refuses sensitive data). A window is represented by its z-scored rows and its z-scored first differences along
   time (``row[t+1] − row[t]``, statistics from public windows), flattened: the differences make temporal coherence
   as visible to the encoder as the values themselves (a time-shuffled window has the right rows but differences
   many standard deviations off). An MLP autoencoder
   ``F → hidden → hidden → embed_dim → hidden → hidden → F`` (SiLU, ``F = (2H − 1)·D``) is trained to reconstruct
   public windows (MSE, Adam, ``steps`` minibatches, seeded: data order, initialisation, everything). Public windows for training
   use stride ``window // 4`` for more samples. The embedding of a window is the encoder output minus the mean
   embedding of the public windows (stored with the encoder), so that cosine similarity measures directions around
   the data's centre rather than the all-positive offset every embedding shares.
3. **Score.** Take the same number ``n = min(#real, #synthetic, max_windows)`` of windows from each set (seeded
   uniform subsample). With unit-normalised embeddings ``r_j`` and ``s_i`` and ``S_ij = cos(s_i, r_j)``, following
   BERTScore's greedy matching:

   * precision ``P = mean_i max_j S_ij`` (every synthetic window has a close real one: realism),
   * recall ``R = mean_j max_i S_ij`` (every real window has a close synthetic one: coverage),
   * **TrajScore = F1 = 2PR / (P + R)**.

   Identical sets give exactly 1. Two independent samples of the same distribution give less than 1 (the nearest
   neighbour is not the point itself), so read a score against :func:`trajscore_baseline`, the same score between
   two disjoint halves of the real episodes, at the same window count (the score grows with ``n``: each half has
   half the real windows, so :func:`trajscore_matched`, which the report uses, scores both at the smaller count).
   The score falls for time-shuffled windows, per-step noise, next states unrelated to states, and synthetic data
   that copies a few real windows (recall drops); see the sanity table in ``docs/evaluation.md``. Like every
   nearest-neighbour metric it favours near-copies of real windows: a constant shift of a real copy (which the time
   differences do not see) can outscore fresh real data, so read TrajScore with the marginal score and the RL
   checks; memorisation is what the membership-inference audits measure.

Save and load the encoder with :meth:`TrajEncoder.save` / :meth:`TrajEncoder.load` (config, weights, normaliser and
centre in one ``torch.save`` file); the same encoder file must be used for every number in one table.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from privsynth.data.dataset import OfflineDataset
from privsynth.data.normalize import Normalizer
from privsynth.errors import InvalidData, SpaceMismatch
from privsynth.nn import mlp

__all__ = ["TrajScoreConfig", "TrajEncoder", "trajectory_windows", "fit_trajscore_encoder", "trajscore",
           "trajscore_baseline", "trajscore_matched"]


@dataclass
class TrajScoreConfig:
    window: int = 32  # transitions per window (PrivORL-j fragment horizon H = 32)
    hidden: int = 256  # MLP width
    embed_dim: int = 64  # embedding size
    steps: int = 1000  # autoencoder minibatch updates on public windows
    batch_size: int = 256
    lr: float = 1e-3  # Adam
    train_stride: int | None = None  # stride of public training windows; None = window // 4
    max_windows: int = 2000  # per side when scoring (seeded subsample)
    seed: int = 0


def trajectory_windows(dataset: OfflineDataset, window: int, stride: int | None = None) -> np.ndarray:
    """Full windows [W, window, D] of ``state | action | reward | next state`` rows, never crossing an episode."""
    rows = dataset.transition_matrix()[:, :-1]
    stride = stride or window
    out = []
    start = 0
    for length in dataset.episode_lengths():
        for k in range(0, int(length) - window + 1, stride):
            out.append(rows[start + k : start + k + window])
        start += int(length)
    if not out:
        raise InvalidData(
            f"dataset '{dataset.info.name}' has no episode of at least {window} transitions; TrajScore needs trajectories"
        )
    return np.stack(out).astype(np.float32)


class TrajEncoder(nn.Module):
    """MLP autoencoder over flattened, publicly normalised windows; ``embed`` gives centred embeddings."""

    def __init__(
        self, normalizer: Normalizer, delta_normalizer: Normalizer, config: TrajScoreConfig, row_dim: int,
        obs_dim: int, act_dim: int,
    ) -> None:
        super().__init__()
        self.config = config
        self.row_dim, self.obs_dim, self.act_dim = row_dim, obs_dim, act_dim
        self.normalizer = normalizer  # rows, public statistics
        self.delta_normalizer = delta_normalizer  # first differences along time, public statistics
        flat, h = (2 * config.window - 1) * row_dim, config.hidden
        self.encoder = mlp(flat, (h, h), config.embed_dim, act=nn.SiLU)
        self.decoder = mlp(config.embed_dim, (h, h), flat, act=nn.SiLU)
        self.register_buffer("center", torch.zeros(config.embed_dim))

    def _flat(self, windows: torch.Tensor) -> torch.Tensor:
        z = (windows - self.normalizer.mean) / self.normalizer.std
        dz = (windows[:, 1:] - windows[:, :-1] - self.delta_normalizer.mean) / self.delta_normalizer.std
        return torch.cat([z.reshape(z.shape[0], -1), dz.reshape(dz.shape[0], -1)], dim=1)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """Reconstruction loss of a batch [B, H, D]."""
        x = self._flat(windows)
        return ((self.decoder(self.encoder(x)) - x) ** 2).mean()

    @torch.no_grad()
    def embed(self, windows: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """Centred embeddings [W, embed_dim] of windows [W, H, D]."""
        if windows.ndim != 3 or windows.shape[1:] != (self.config.window, self.row_dim):
            raise SpaceMismatch(
                f"windows have shape {windows.shape[1:]}, the encoder expects ({self.config.window}, {self.row_dim})"
            )
        self.eval()
        out = [
            self.encoder(self._flat(torch.as_tensor(windows[i : i + batch_size]))) - self.center
            for i in range(0, len(windows), batch_size)
        ]
        return torch.cat(out).double().numpy()

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save(
            {
                "config": dataclasses.asdict(self.config),
                "dims": [self.row_dim, self.obs_dim, self.act_dim],
                "normalizer_source": self.normalizer.source,
                "state_dict": {k: v for k, v in self.state_dict().items() if isinstance(v, torch.Tensor)},
            },
            tmp,
        )
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TrajEncoder":
        """Inverse of :meth:`save`. The file is read as data (tensors and plain types, never unpickled) and checked
        part by part; a damaged or hostile file is one :class:`InvalidData` line naming it."""
        from privsynth.config_io import config_from_dict
        from privsynth.synth.base import check_weights_fit
        from privsynth.synth.checkpoint import load_weights_only

        path = Path(path)
        if not path.is_file():
            raise InvalidData(f"no TrajScore encoder file at {path}")
        blob = load_weights_only(path)  # refuses pickled objects and names a damaged file
        damaged = f"{path} is not a TrajScore encoder file"
        if not isinstance(blob, dict) or not isinstance(blob.get("config"), dict):
            raise InvalidData(f"{damaged}: it holds no 'config' mapping")
        dims = blob.get("dims")
        if not (isinstance(dims, (list, tuple)) and len(dims) == 3
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)):
            raise InvalidData(f"{damaged}: 'dims' must be three positive whole numbers, got {dims!r:.60}")
        row_dim, obs_dim, act_dim = dims
        if row_dim != 2 * obs_dim + act_dim + 1:
            raise InvalidData(f"{damaged}: its row width {row_dim} is not that of {obs_dim}/{act_dim} obs/action dims")
        source = blob.get("normalizer_source")
        if not isinstance(source, str):
            raise InvalidData(f"{damaged}: 'normalizer_source' is not a string")
        try:
            cfg = config_from_dict(TrajScoreConfig, blob["config"])
        except InvalidData as exc:
            raise InvalidData(f"{damaged}: {exc}") from None
        if cfg.window < 2:
            raise InvalidData(f"{damaged}: its window must be at least 2 transitions, got {cfg.window}")

        def build() -> dict[str, Any]:
            return {"encoder": cls(Normalizer(row_dim, source=source), Normalizer(row_dim, source=source), cfg,
                                   row_dim, obs_dim, act_dim)}

        state = blob.get("state_dict")
        check_weights_fit(build, {"encoder": state}, damaged)  # on the meta device, before allocating
        enc = build()["encoder"]
        enc.load_state_dict(state, strict=False)  # every tensor is there (checked); the normalisers' source is not
        return enc.eval()


def fit_trajscore_encoder(
    public: OfflineDataset | Sequence[OfflineDataset], config: TrajScoreConfig | None = None, *, progress: bool = False
) -> TrajEncoder:
    """Train the TrajScore encoder on **public** trajectories (raises on data marked sensitive). Deterministic."""
    cfg = config or TrajScoreConfig()
    datasets = [public] if isinstance(public, OfflineDataset) else list(public)
    if not datasets:
        raise InvalidData("TrajScore needs at least one public dataset to train its encoder")
    full = Normalizer.fit_public(datasets)  # refuses sensitive data; terminal column (last) dropped below
    normalizer = Normalizer.from_stats(full.mean[:-1].numpy(), full.std[:-1].numpy(), source=full.source)
    if cfg.window < 2:
        raise InvalidData(f"TrajScore windows need at least 2 transitions, got {cfg.window}")
    stride = cfg.train_stride or max(cfg.window // 4, 1)
    windows = np.concatenate([trajectory_windows(ds, cfg.window, stride) for ds in datasets])
    deltas = (windows[:, 1:] - windows[:, :-1]).reshape(-1, windows.shape[2]).astype(np.float64)
    scale = np.maximum(deltas.std(axis=0), 1e-3 * np.maximum(full.std[:-1].numpy(), 1e-3))
    delta_norm = Normalizer.from_stats(deltas.mean(axis=0), scale, source=full.source)
    d0 = datasets[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = TrajEncoder(normalizer, delta_norm, cfg, windows.shape[2], d0.obs_dim, d0.act_dim)
        data = torch.as_tensor(windows)
        gen = torch.Generator().manual_seed(cfg.seed)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
        model.train()
        steps = range(cfg.steps)
        if progress:
            from tqdm import tqdm

            steps = tqdm(steps, desc="TrajScore encoder", unit="step", mininterval=1.0)
        for _ in steps:
            idx = torch.randint(0, len(data), (min(cfg.batch_size, len(data)),), generator=gen)
            loss = model(data[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        with torch.no_grad():
            model.center.zero_()
            model.center.copy_(torch.as_tensor(model.embed(windows).mean(axis=0), dtype=torch.float32))
    return model.eval()


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def trajscore(
    synthetic: OfflineDataset, real: OfflineDataset, encoder: TrajEncoder, *, seed: int | None = None,
    max_windows: int | None = None,
) -> dict[str, Any]:
    """TrajScore (F1 of greedy cosine matching, module docstring) with its precision and recall.

    ``max_windows`` (default: the encoder config's) caps the windows per side. The score grows with the number of
    windows (more candidates for every nearest neighbour), so two scores are comparable only at the same count:
    :func:`trajscore_matched` scores a synthetic set and the real-halves baseline at one count.
    """
    real.check_compatible(synthetic)
    if (real.obs_dim, real.act_dim) != (encoder.obs_dim, encoder.act_dim):
        raise SpaceMismatch(
            f"the TrajScore encoder was trained on obs/action dims {encoder.obs_dim}/{encoder.act_dim}, "
            f"the data has {real.obs_dim}/{real.act_dim}"
        )
    cfg = encoder.config
    wr = trajectory_windows(real, cfg.window)
    ws = trajectory_windows(synthetic, cfg.window)
    cap = cfg.max_windows if max_windows is None else int(max_windows)
    if cap < 1:
        raise InvalidData(f"TrajScore needs at least one window per side, got max_windows={max_windows}")
    n = min(len(wr), len(ws), cap)
    rng = np.random.default_rng(cfg.seed if seed is None else seed)
    wr = wr[np.sort(rng.choice(len(wr), size=n, replace=False))]
    ws = ws[np.sort(rng.choice(len(ws), size=n, replace=False))]
    er, es = encoder.embed(wr), encoder.embed(ws)
    sim = _unit(es) @ _unit(er).T  # [n_synth, n_real]
    precision = float(sim.max(axis=1).mean())
    recall = float(sim.max(axis=0).mean())
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "trajscore": float(min(f1, 1.0)),
        "precision": precision,
        "recall": recall,
        "windows": int(n),
        "window": cfg.window,
        "encoder": encoder.normalizer.source,
    }


def trajscore_baseline(
    real: OfflineDataset, encoder: TrajEncoder, *, seed: int = 0, max_windows: int | None = None
) -> dict[str, Any]:
    """TrajScore between two disjoint halves of the real episodes: what fresh real data scores at this window count.

    Each half has about half the real windows, so below ``2 · max_windows`` real windows this baseline uses fewer
    windows than ``trajscore(synthetic, real)`` and is biased low against it; compare through :func:`trajscore_matched`.
    """
    a, b = real.split_episodes(0.5, seed=seed)
    return trajscore(a, b, encoder, seed=seed, max_windows=max_windows)


def trajscore_matched(
    synthetic: OfflineDataset, real: OfflineDataset, encoder: TrajEncoder, *, seed: int = 0
) -> dict[str, Any]:
    """:func:`trajscore` of ``synthetic`` against ``real`` and the real-halves baseline, both at one window count.

    The count is ``min(windows of each real half, synthetic windows, max_windows)``, so the baseline (fresh real data
    against real data) and the synthetic score have equally many nearest-neighbour candidates. Returns the synthetic
    score's dict with ``baseline`` (its TrajScore), ``baseline_precision`` and ``baseline_recall`` added; raises
    :class:`~privsynth.errors.InvalidData` when the real data has fewer than two episodes or a half has no window.
    """
    cfg = encoder.config
    a, b = real.split_episodes(0.5, seed=seed)
    n = min(len(trajectory_windows(a, cfg.window)), len(trajectory_windows(b, cfg.window)),
            len(trajectory_windows(synthetic, cfg.window)), cfg.max_windows)
    base = trajscore(a, b, encoder, seed=seed, max_windows=n)
    out = trajscore(synthetic, real, encoder, max_windows=n)
    out.update(baseline=base["trajscore"], baseline_precision=base["precision"], baseline_recall=base["recall"])
    return out
