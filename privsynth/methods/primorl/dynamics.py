"""The private dynamics ensemble of PriMORL: "TDP Model Ensemble Training" (paper Algorithms 1-3, section 4.2).

Each trajectory plays the role of a DP-FedAvg user (McMahan et al. 2018). One round:

1. Poisson sampling: every trajectory is included independently with probability q (never fixed-size batches;
   an empty round still adds noise, as Alg. 1 and the accountant assume).
2. For every sampled trajectory, the whole ensemble is cloned and trained locally on that trajectory only
   (E local epochs, minibatches of B transitions, a fresh optimiser per clone), projecting the clone back onto the
   clip ball after every local step (DP-FedAvg UserUpdate, Alg. 2 line 11).
3. Ensemble clipping (Alg. 3): each member's delta to C/√N ("flat") or each member's parameter tensor to C/√(N·L)
   ("per_layer"), so one trajectory's whole-ensemble delta has L2 norm ≤ C.
4. The clipped deltas are summed, divided by the *expected* batch size qK~ (not |U_t|: the sensitivity
   bound of McMahan et al.'s Theorem 1 needs the fixed denominator), and ONE Gaussian vector of
   std z·C/(qK~) is added to the concatenated ensemble update. K~ is a Laplace count of the trajectories
   (privsynth.privacy.count; K is private under add/remove), so dividing by qK~ is post-processing of the noisy sum.

Accounting: one round is the Poisson-subsampled Gaussian mechanism with noise multiplier z on a sum of sensitivity C
(add/remove one trajectory), exactly the event of one DP-SGD step, so T rounds are recorded on the ledger as a
``LedgerEvent.dpsgd`` with (z, q, T) and composed by our accountants (:mod:`privsynth.privacy.accounting`).

Why this module is long: Algorithms 1-3 (Poisson rounds, vectorised local updates, ensemble clipping, the noisy
mean and its accounting with the unit count) share one loop's state; split, each part would need the others' tensors.

Why our own loop instead of :func:`privsynth.privacy.dp_train`: that engine clips per-example *gradients* of one
step; Algorithm 1 clips a trajectory's multi-step *local update*, which Opacus cannot express. The local updates of
all sampled trajectories are vectorised by holding every clone in a leading batch dimension of the weight tensors:
the summed loss has per-clone gradients because each clone's loss depends only on its own weights, so one
``autograd.grad`` gives all of them (no Python loop over trajectories).

Normalisation uses only public scales (env bounds / physics), never statistics of the sensitive data (a
fitted statistic would escape the post-processing argument of the paper's Theorem 4.5).
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from tqdm.auto import tqdm

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.count import count_epsilon, noisy_unit_count
from privsynth.privacy.ledger import LedgerEvent
from privsynth.privacy.noise import NoiseSource

__all__ = ["EnsembleConfig", "GaussianEnsemble", "TDPConfig", "TDPResult", "ensemble_clip", "poisson_sample",
           "primorl_epsilon", "train_tdp_ensemble", "train_ensemble_nonprivate", "TrajectoryTensors"]

Params = dict[str, torch.Tensor]


# --------------------------------------------------------------------------------------------------- model
@dataclass
class EnsembleConfig:
    """Gaussian ensemble of section 4.2 / Table 7 (Pendulum column)."""

    members: int = 3  # N (Table 7: 3 Pendulum, 5 CartPole, 7 HalfCheetah)
    hidden: tuple[int, ...] = (64, 64)  # 2 x 64 Swish for Pendulum
    weight_decay: tuple[float, ...] = (2.5e-5, 5e-5, 1e-4)  # per linear layer, MOPO-style [GUESS: paper Table 7 gives none]
    max_logvar_init: float = 0.5  # soft bounds of the log-variance (MOPO)
    min_logvar_init: float = -10.0
    logvar_bound_coef: float = 0.01


class GaussianEnsemble(torch.nn.Module):
    """N Gaussian models p(Δs, r | s, a) = N(μ_i, diag σ_i²) with per-member weights stored as [N, ...] tensors.

    Inputs and targets are scaled by fixed public scales (``in_scale``, ``out_scale`` buffers). Every trainable tensor
    (including the per-member log-variance bounds, which would otherwise escape the clip) has the member index first, so ensemble clipping
    covers each exactly once. :meth:`forward_params` also accepts clones with an extra leading dimension [P, N, ...].
    """

    def __init__(self, obs_dim: int, act_dim: int, cfg: EnsembleConfig = EnsembleConfig(), *,
                 in_scale: torch.Tensor | np.ndarray | None = None, out_scale: torch.Tensor | np.ndarray | None = None,
                 seed: int = 0) -> None:
        super().__init__()
        self.cfg, self.obs_dim, self.act_dim = cfg, obs_dim, act_dim
        self.out_dim = obs_dim + 1
        dims = [obs_dim + act_dim, *cfg.hidden, 2 * self.out_dim]
        if len(cfg.weight_decay) != len(dims) - 1:
            raise InvalidData(f"weight_decay needs {len(dims) - 1} entries, one per linear layer")
        g = torch.Generator().manual_seed(seed)
        n = cfg.members
        for j, (i, o) in enumerate(zip(dims[:-1], dims[1:])):
            w = torch.randn(n, i, o, generator=g) / math.sqrt(i)  # independent inits = ensemble diversity (members see the same data)
            self.register_parameter(f"w{j}", torch.nn.Parameter(w))
            self.register_parameter(f"b{j}", torch.nn.Parameter(torch.zeros(n, 1, o)))
        self.n_layers = len(dims) - 1
        self.max_logvar = torch.nn.Parameter(torch.full((n, 1, self.out_dim), cfg.max_logvar_init))
        self.min_logvar = torch.nn.Parameter(torch.full((n, 1, self.out_dim), cfg.min_logvar_init))
        ones_in, ones_out = torch.ones(obs_dim + act_dim), torch.ones(self.out_dim)
        self.register_buffer("in_scale", torch.as_tensor(in_scale if in_scale is not None else ones_in, dtype=torch.float32))
        self.register_buffer("out_scale", torch.as_tensor(out_scale if out_scale is not None else ones_out, dtype=torch.float32))

    # -- functional core --------------------------------------------------------------------------------------
    def params(self) -> Params:
        return {k: v for k, v in self.named_parameters()}

    def forward_params(self, p: Params, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised (mean, logvar) of shape [..., N, B, out] for scaled inputs x [..., N, B, in]."""
        h = x
        for j in range(self.n_layers):
            h = h @ p[f"w{j}"] + p[f"b{j}"]
            if j < self.n_layers - 1:
                h = F.silu(h)  # Swish
        mean, logvar = h.split(self.out_dim, dim=-1)
        maxlv, minlv = p["max_logvar"], p["min_logvar"]
        logvar = maxlv - F.softplus(maxlv - logvar)
        logvar = minlv + F.softplus(logvar - minlv)
        return mean, logvar

    def loss_params(self, p: Params, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-member Gaussian NLL (MOPO form) + log-variance bound term + weight decay; shape [..., N].

        x, y: scaled inputs/targets [..., N, B, ·]; mask [..., N, B] marks real transitions (padding is 0).
        """
        mean, logvar = self.forward_params(p, x)
        nll = ((mean - y) ** 2 * torch.exp(-logvar) + logvar).sum(-1)
        denom = mask.sum(-1).clamp_min(1.0)
        loss = (nll * mask).sum(-1) / denom
        loss = loss + self.cfg.logvar_bound_coef * (p["max_logvar"].sum((-1, -2)) - p["min_logvar"].sum((-1, -2)))
        for j, wd in enumerate(self.cfg.weight_decay):
            loss = loss + wd * (p[f"w{j}"] ** 2).sum((-1, -2))
        return loss

    # -- user-facing prediction in raw units --------------------------------------------------------------------
    def scale_inputs(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return torch.cat([obs, act], -1) / self.in_scale

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw-unit means and stds of (Δs, r) for every member: two tensors [N, B, obs_dim + 1]."""
        x = self.scale_inputs(obs, act).unsqueeze(0).expand(self.cfg.members, -1, -1)
        mean, logvar = self.forward_params(self.params(), x)
        return mean * self.out_scale, torch.exp(0.5 * logvar) * self.out_scale

    def block_names(self) -> list[str]:
        return [k for k, _ in self.named_parameters()]


# --------------------------------------------------------------------------------------------------- clipping
def ensemble_clip(delta: Params, clip_norm: float, strategy: str = "per_layer", *, member_dim: int = 0) -> Params:
    """Ensemble clipping (Alg. 3): flat = each member's whole delta to C/√N; per_layer = each member's tensor to
    C/√(N·L). Works on clones too (``member_dim`` is the member axis; axes before it are batch axes). The
    concatenated delta of one clone then has L2 norm ≤ C."""
    first = next(iter(delta.values()))
    n = first.shape[member_dim]
    sq = {k: rearrange(v, "... n a b -> ... n (a b)").pow(2).sum(-1) for k, v in delta.items()}  # [..., N]
    if strategy == "flat":
        norms = torch.stack(list(sq.values())).sum(0).sqrt()
        factor = (clip_norm / math.sqrt(n) / norms.clamp_min(1e-12)).clamp(max=1.0)
        return {k: v * factor[..., None, None] for k, v in delta.items()}
    if strategy == "per_layer":
        bound = clip_norm / math.sqrt(n * len(delta))
        return {k: v * (bound / sq[k].sqrt().clamp_min(1e-12)).clamp(max=1.0)[..., None, None] for k, v in delta.items()}
    raise InvalidData(f"unknown clipping strategy '{strategy}': choose flat or per_layer")


def flat_norm(p: Params) -> torch.Tensor:
    """L2 norm over all tensors, per leading batch index if the tensors have one beyond [N, a, b]."""
    return torch.stack([rearrange(v, "... n a b -> ... (n a b)").pow(2).sum(-1) for v in p.values()]).sum(0).sqrt()


def poisson_sample(n_units: int, q: float, generator: torch.Generator) -> torch.Tensor:
    """Indices of the units included in a round: independent Bernoulli(q) per unit (Poisson sampling)."""
    return torch.nonzero(torch.rand(n_units, generator=generator) < q).flatten()


# --------------------------------------------------------------------------------------------------- data view
@dataclass
class TrajectoryTensors:
    """Scaled per-trajectory (input, target) tensors padded to the longest trajectory: x [K, Lmax, in],
    y [K, Lmax, out], lengths [K]. One row of K is one privacy unit."""

    x: torch.Tensor
    y: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def from_dataset(cls, ds: OfflineDataset, model: GaussianEnsemble) -> "TrajectoryTensors":
        lengths = ds.episode_lengths()
        k, lmax = len(lengths), int(lengths.max())
        obs, act = torch.as_tensor(ds.observations), torch.as_tensor(ds.actions)
        x = model.scale_inputs(obs, act)
        y = torch.cat([torch.as_tensor(ds.next_observations - ds.observations),
                       torch.as_tensor(ds.rewards)[:, None]], -1) / model.out_scale
        pos = np.concatenate([np.arange(n) for n in lengths])
        row = np.repeat(np.arange(k), lengths)
        xp, yp = torch.zeros(k, lmax, x.shape[1]), torch.zeros(k, lmax, y.shape[1])
        xp[row, pos], yp[row, pos] = x, y
        return cls(xp, yp, torch.as_tensor(lengths))

    def __len__(self) -> int:
        return self.x.shape[0]


# --------------------------------------------------------------------------------------------------- training
@dataclass
class TDPConfig:
    """Algorithm 1 settings (Table 8, Pendulum column; scaled down where noted)."""

    sample_rate: float = 0.01  # q; paper 1e-3 with K = 30k (qK ≈ 30); 1e-2 with our K = 3k keeps qK ≈ 30
    # qK instead of q: q = min(expected_batch / K~, 0.5) from the DP count K~ of the trajectories (K is private under
    # add/remove, privsynth.privacy.count); None: the fixed ``sample_rate`` above
    expected_batch: float | None = None
    rounds: int = 700  # T; paper ~7000 (7 expected passes at q = 1e-3); 700 = 7 passes at q = 1e-2
    clip_norm: float = 0.3  # C: not reported for Pendulum; 0.3 chosen from {0.1, 0.3, 1} by public one-step MSE (docs)
    strategy: str = "per_layer"  # Pendulum: per-layer clipping (Table 8)
    noise_multiplier: float | None = None  # z; None: calibrate to target_epsilon
    target_epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = "rdp"  # the paper's accountant (dp-accounting RDP)
    local_epochs: int = 1  # E
    local_batch: int = 64  # B; paper 16 (13 local steps), 64 gives 4 steps per round: 3x cheaper on CPU, still DP
    local_lr: float = 3e-3  # η (paper 1e-3 with 13 local steps; 3e-3 with our 4 larger-batch steps)
    local_optimizer: str = "adam"  # fresh state per clone; "sgd" is the pseudocode's choice
    server_lr: float = 1.0  # applied to the noised aggregate (post-processing)
    eval_every: int = 50  # rounds between evaluations on the PUBLIC data (model selection only)
    seed: int = 0  # unused by the mechanism (the local minibatch orders come from the noise source); kept in the record
    noise_seed: int | None = None  # None: Poisson masks and noise from OS entropy; an int replays them (NOT DP)


@dataclass
class TDPResult:
    model: GaussianEnsemble
    event: LedgerEvent | None  # None when z = 0 (no privacy)
    epsilon: float
    noise_multiplier: float
    rounds: int
    history: list[dict[str, float]] = field(default_factory=list)
    trajectories_noisy: int = 0  # the DP count K~ that set q·K~ (0 for a run without noise)


def primorl_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float = 1e-5,
                    accountant: str = "rdp", *, count_scale: float = 0.0) -> float:
    """ε^MA(z, q, T, δ) of Theorem 4.2: T Poisson-subsampled Gaussian rounds (inf for z = 0), composed with the
    Laplace count of the trajectories when ``count_scale`` > 0."""
    if noise_multiplier <= 0:
        return math.inf
    return acc.dpsgd_epsilon(noise_multiplier, sample_rate, rounds, delta, accountant, count_scale=count_scale)


def _adam(grads: Params, state: dict, lr: float, step: torch.Tensor | int, b1: float = 0.9, b2: float = 0.999,
          active: torch.Tensor | None = None) -> Params:
    """Adam on clone-batched tensors [P, N, ...]. ``step`` is the per-(clone, member) step count [P, N] (or an int)
    and ``active`` [P, N] marks the clones that took a step: the others keep their moments untouched, so a clone's
    local optimiser state depends on its own trajectory only, never on how long the co-sampled trajectories are
    (that would move its clipped update with another trajectory, outside the sensitivity C)."""
    out = {}
    step_t = torch.as_tensor(step, dtype=torch.float32).clamp_min(1.0)
    for k, g in grads.items():
        m, v = state.setdefault(k, (torch.zeros_like(g), torch.zeros_like(g)))
        m_new = b1 * m + (1 - b1) * g
        v_new = b2 * v + (1 - b2) * g * g
        if active is not None:
            on = active.reshape(*active.shape, *([1] * (g.dim() - active.dim()))).bool()
            m_new, v_new = torch.where(on, m_new, m), torch.where(on, v_new, v)
        state[k] = (m_new, v_new)
        st = step_t.reshape(*step_t.shape, *([1] * (g.dim() - step_t.dim())))
        out[k] = lr * (m_new / (1 - b1**st)) / ((v_new / (1 - b2**st)).sqrt() + 1e-8)
    return out


def local_updates(model: GaussianEnsemble, data: TrajectoryTensors, idx: torch.Tensor, cfg: TDPConfig,
                  generator: torch.Generator) -> Params:
    """Clipped local deltas of the sampled trajectories ``idx``: tensors [P, N, ...] (Alg. 2 lines 4-12).

    Each clone p trains on trajectory idx[p] only; members get independent minibatch orders (data-independent
    randomness); the clone is projected onto the ensemble clip ball after every local step."""
    start = {k: v.detach() for k, v in model.params().items()}
    n_clones, n = len(idx), model.cfg.members
    theta = {k: v.unsqueeze(0).expand(n_clones, *v.shape).clone() for k, v in start.items()}
    x, y, lens = data.x[idx], data.y[idx], data.lengths[idx]
    lmax, b = x.shape[1], cfg.local_batch
    n_batches = math.ceil(int(lens.max()) / b) if n_clones else 0
    state: dict = {}
    steps = torch.zeros(n_clones, n)  # local steps taken by each (clone, member): its own Adam clock
    for _ in range(cfg.local_epochs):
        # per (trajectory, member) permutation of the positions, drawn for every trajectory so that a trajectory's
        # minibatch order does not depend on which others were sampled; padding positions sort last
        keys = torch.rand(len(data), n, data.x.shape[1], generator=generator)[idx][..., :lmax]
        keys = keys + (torch.arange(lmax)[None, None, :] >= lens[:, None, None]).float() * 2.0
        perm = keys.argsort(-1)
        for j in range(n_batches):
            pos = perm[..., j * b:(j + 1) * b]  # [P, N, B]
            gather = lambda t: torch.gather(t[:, None].expand(-1, n, -1, -1), 2, pos[..., None].expand(-1, -1, -1, t.shape[-1]))
            xb, yb = gather(x), gather(y)
            mb = (pos < lens[:, None, None]).float()
            active = (mb.sum(-1) > 0).float()  # [P, N]: skip clones whose trajectory has no batch left
            params = {k: v.requires_grad_(True) for k, v in theta.items()}
            loss = (model.loss_params(params, xb, yb, mb) * active).sum()
            grads = torch.autograd.grad(loss, list(params.values()))
            grads = dict(zip(params.keys(), grads))
            with torch.no_grad():
                steps = steps + active
                if cfg.local_optimizer == "adam":
                    upd = _adam(grads, state, cfg.local_lr, steps, active=active)
                elif cfg.local_optimizer == "sgd":
                    upd = {k: cfg.local_lr * g for k, g in grads.items()}
                else:
                    raise InvalidData(f"unknown local optimiser '{cfg.local_optimizer}': choose adam or sgd")
                act = active[..., None, None]
                delta = {k: theta[k].detach() - upd[k] * act - start[k] for k in theta}
                delta = ensemble_clip(delta, cfg.clip_norm, cfg.strategy, member_dim=1)
                theta = {k: start[k] + delta[k] for k in theta}
    return {k: theta[k].detach() - start[k] for k in theta}


@torch.no_grad()
def public_nll(model: GaussianEnsemble, data: TrajectoryTensors) -> float:
    """Mean Gaussian NLL term (no regularisers) of the ensemble on a PUBLIC split (model selection)."""
    mask = (torch.arange(data.x.shape[1])[None] < data.lengths[:, None]).reshape(-1)
    x = data.x.reshape(-1, data.x.shape[-1])[mask]
    y = data.y.reshape(-1, data.y.shape[-1])[mask]
    xs = x.unsqueeze(0).expand(model.cfg.members, -1, -1)
    mean, logvar = model.forward_params(model.params(), xs)
    return float(((mean - y) ** 2 * torch.exp(-logvar) + logvar).sum(-1).mean())


def train_tdp_ensemble(sensitive: TrajectoryTensors, model: GaussianEnsemble, cfg: TDPConfig, *,
                       public: TrajectoryTensors | None = None, progress: bool = False,
                       on_round: Callable[[int, GaussianEnsemble], None] | None = None) -> TDPResult:
    """Algorithm 1 on the sensitive trajectories; returns the private ensemble and its ledger event.

    ``public`` (the paper's 1% public test split) is only used to keep the best snapshot; the accounted T is the
    number of rounds actually run (all of them: every iterate is treated as released)."""
    k = len(sensitive)
    acc.check_delta(cfg.delta, k)  # a refusal for the data holder: it reads the exact K (docs/privacy.md, "Refusals")
    if cfg.noise_multiplier is None and cfg.target_epsilon is None:
        raise PrivacyError("give either a noise multiplier or a target epsilon")
    source = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed)
    # K is private under add/remove one trajectory: a Laplace count K~ (privsynth.privacy.count) sets everything sized
    # by K (q from expected_batch, the fixed denominator qK~) and the card shows K~. Its ε is COUNT_SHARE of the
    # target, and z is calibrated so that count + rounds compose (RDP/PLD, as dp_train) to the target; with a given z
    # the count spends COUNT_SHARE of that run's ε on top, and the event composes both.
    z_run = None if cfg.noise_multiplier is None else float(cfg.noise_multiplier)
    k_noisy, count_scale = k, 0.0
    if z_run is None or z_run > 0:
        if z_run is None:
            eps_count = count_epsilon(cfg.target_epsilon)
        else:  # COUNT_SHARE of the run's ε (a bound at q = 0.5 when q comes from the count), at least 0.02
            q0 = cfg.sample_rate if cfg.expected_batch is None else 0.5
            eps_count = count_epsilon(max(primorl_epsilon(z_run, q0, cfg.rounds, cfg.delta, cfg.accountant), 1.0))
        k_noisy, _ = noisy_unit_count(k, epsilon=eps_count, unit="trajectory", source=source,
                                      name="number of trajectories K (Laplace count)")
        count_scale = 1.0 / eps_count
    q = cfg.sample_rate if cfg.expected_batch is None else min(float(cfg.expected_batch) / k_noisy, 0.5)
    if not 0 < q < 1:
        raise PrivacyError(f"sample rate {q} must be in (0, 1)")
    if z_run is None:
        z = acc.calibrate_noise_multiplier(cfg.target_epsilon, cfg.delta, q, cfg.rounds, cfg.accountant,
                                           count_scale=count_scale)
    else:
        z = z_run
    # privacy randomness (Poisson masks, Gaussian noise) from the NoiseSource, never from cfg.seed (docs/DESIGN.md
    # invariant 6). So are the local minibatch orders: they shape each clipped trajectory update and are drawn from one
    # stream over the dataset, so if anyone could replay them (cfg.seed is on the card) adding one trajectory would
    # move the others' updates, outside the clip-norm sensitivity. noise_seed replays all three (tests, NOT DP).
    mask_gen, noise_gen, gen = source.torch_generator(), source.torch_generator(), source.torch_generator()
    expected = q * k_noisy  # fixed denominator qK~ (module docstring, step 4): a DP output, never the exact K
    sigma = z * cfg.clip_norm / expected
    best, best_score, history = None, math.inf, []
    for t in tqdm(range(cfg.rounds), disable=not progress, desc="TDP ensemble rounds"):
        idx = poisson_sample(k, q, mask_gen)
        deltas = local_updates(model, sensitive, idx, cfg, gen)
        with torch.no_grad():
            for name, p in model.named_parameters():
                agg = deltas[name].sum(0) / expected
                agg = agg + sigma * torch.randn(p.shape, generator=noise_gen)  # one draw over the whole ensemble
                p.add_(cfg.server_lr * agg)
        if on_round is not None:
            on_round(t, model)
        if public is not None and ((t + 1) % cfg.eval_every == 0 or t + 1 == cfg.rounds):
            score = public_nll(model, public)
            history.append({"round": t + 1, "public_nll": score})  # never the realised batch size (not DP)
            if score < best_score:
                best, best_score = copy.deepcopy(model.state_dict()), score
    if best is not None:
        model.load_state_dict(best)
    eps = primorl_epsilon(z, q, cfg.rounds, cfg.delta, cfg.accountant, count_scale=count_scale)
    event = None
    if z > 0:
        event = LedgerEvent.dpsgd("PriMORL TDP ensemble (Alg. 1)", noise_multiplier=z, sample_rate=q,
                                  steps=cfg.rounds, max_grad_norm=cfg.clip_norm, count_scale=count_scale,
                                  unit="trajectory", clip_strategy=cfg.strategy, members=model.cfg.members,
                                  trajectories_noisy=k_noisy,
                                  local_epochs=cfg.local_epochs, local_batch=cfg.local_batch, epsilon=eps,
                                  noise=source.kind)
    return TDPResult(model, event, eps, z, cfg.rounds, history, trajectories_noisy=k_noisy if count_scale else 0)


def train_ensemble_nonprivate(data: TrajectoryTensors, model: GaussianEnsemble, *, steps: int = 5000,
                              batch: int = 256, lr: float = 1e-3, seed: int = 0, progress: bool = False) -> GaussianEnsemble:
    """Plain minibatch maximum likelihood on transitions (the MOPO-style model). Only for data that is already
    private (DP synthetic datasets: post-processing) or public; it spends no budget and adds no noise."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(data.x.shape[1])[None] < data.lengths[:, None]).reshape(-1)
    x = data.x.reshape(-1, data.x.shape[-1])[mask]
    y = data.y.reshape(-1, data.y.shape[-1])[mask]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = model.cfg.members
    for _ in tqdm(range(steps), disable=not progress, desc="ensemble (non-private)"):
        i = torch.randint(0, len(x), (n, batch), generator=gen)  # independent bootstrap-like batches per member
        loss = model.loss_params(model.params(), x[i], y[i], torch.ones(n, batch)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def config_dict(cfg: object) -> dict:
    return asdict(cfg)  # type: ignore[call-overload]
