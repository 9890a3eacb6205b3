"""CartPole / Acrobot variants, thousands of cheap p_min-greedy experts, and expert-tagged offline data.

Seed paper: Sharma, Vinod et al., "Preserving Expert-Level Privacy in Offline RL" (TMLR 2025), App. B.1 / Fig. 5.
The paper trains 3000 PPO experts per environment (top 3 of a PPO grid on each of 1000 physics variants), makes them
p_min-greedy (p_min = 0.02) and rolls each out 20 times in the default environment. That costs ~3e9 env steps, so
here each expert is a **linear greedy policy** ``argmax(W·obs + c)`` found by a few rounds of a
cross-entropy search on its own variant, run on a vectorised NumPy replica of the Gymnasium dynamics (one array row
per (variant, candidate)). Why our own NumPy physics instead of ``gymnasium.make``: 30k parallel rollouts per search
round would be ~1000x slower through the Python env API; ``tests/test_expert_envs.py`` checks the replicas step by
step against Gymnasium.

Variant grids (paper §B.1, 10 values per factor, 1000 variants):
* CartPole: gravity ∈ [8.75, 11], force_mag ∈ [9, 11.25], masscart ∈ [0.8, 1.25] (total mass recomputed).
* Acrobot: link length ∈ [0.8, 1.2] (applied to link 1 and to both centre-of-mass positions l/2, because Gymnasium's
  dynamics never read LINK_LENGTH_2), mass 1 ∈ [0.9, 1.1], mass 2 ∈ [0.9, 1.1].

Data (paper §4.2): every expert made p_min-greedy (greedy action w.p. 1 − (|A|−1)p_min, each other action w.p.
p_min), rolled out ``n_traj_per_expert`` times in the default environment with a 200-step cap. Time-limit ends are
stored as ``terminal = False`` (bootstrap), real terminations as ``True``. Every transition keeps its expert id.

Why this module is long: the NumPy replicas of both environments, the experts and their data share array
layouts that ``tests/test_expert_envs.py`` checks together against Gymnasium.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privsynth.errors import InvalidData
from privsynth.rl.evaluate import evaluate_policy

__all__ = [
    "ENV_SPECS", "EnvSpec", "VecClassicEnv", "LinearExperts", "ExpertData", "ExpertPoolConfig",
    "variant_grid", "train_linear_experts", "collect_expert_data", "make_expert_pool", "default_env_returns",
]


# ------------------------------------------------------------------------------------------------ env specs
@dataclass(frozen=True)
class EnvSpec:
    name: str
    obs_dim: int
    n_actions: int
    horizon: int  # data cap (paper: 200 for both)
    eval_horizon: int  # paper: 1000 for CartPole ("increased difficulty"), 200 for Acrobot
    defaults: dict[str, float]
    grid: dict[str, tuple[float, float]]  # paper §B.1 ranges, 10 values each


ENV_SPECS: dict[str, EnvSpec] = {
    "cartpole": EnvSpec("cartpole", 4, 2, 200, 1000, dict(gravity=9.8, force_mag=10.0, masscart=1.0),
                        dict(gravity=(8.75, 11.0), force_mag=(9.0, 11.25), masscart=(0.8, 1.25))),
    "acrobot": EnvSpec("acrobot", 6, 3, 200, 200, dict(link_length=1.0, mass1=1.0, mass2=1.0),
                       dict(link_length=(0.8, 1.2), mass1=(0.9, 1.1), mass2=(0.9, 1.1))),
}


def get_spec(env: str) -> EnvSpec:
    if env not in ENV_SPECS:
        raise InvalidData(f"unknown environment '{env}': choose {', '.join(ENV_SPECS)}")
    return ENV_SPECS[env]


def variant_grid(env: str, per_factor: int = 10) -> dict[str, np.ndarray]:
    """The full factorial grid (per_factor³ variants) of physics parameters, as arrays of length per_factor³."""
    spec = get_spec(env)
    axes = [np.linspace(lo, hi, per_factor) for lo, hi in spec.grid.values()]
    mesh = np.meshgrid(*axes, indexing="ij")
    return {k: m.ravel() for k, m in zip(spec.grid, mesh)}


# ------------------------------------------------------------------------------------------------ dynamics
class VecClassicEnv:
    """B copies of CartPole-v1 or Acrobot-v1 (Gymnasium equations), each with its own physics parameters."""

    def __init__(self, env: str, n: int, params: dict[str, np.ndarray] | None = None, seed: int = 0) -> None:
        self.spec = get_spec(env)
        self.n = int(n)
        p = {k: np.full(self.n, v, dtype=np.float64) for k, v in self.spec.defaults.items()}
        for k, v in (params or {}).items():
            if k not in p:
                raise InvalidData(f"unknown {env} parameter '{k}'")
            p[k] = np.broadcast_to(np.asarray(v, dtype=np.float64), (self.n,)).copy()
        self.p = p
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros((self.n, 4))

    def reset(self) -> np.ndarray:
        lim = 0.05 if self.spec.name == "cartpole" else 0.1
        self.state = self.rng.uniform(-lim, lim, size=(self.n, 4))
        return self.obs()

    def obs(self) -> np.ndarray:
        s = self.state
        if self.spec.name == "cartpole":
            return s.astype(np.float32)
        return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]],
                        axis=1).astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance all copies; returns (obs, reward, terminated). The caller handles resets and time limits."""
        action = np.asarray(action)
        if self.spec.name == "cartpole":
            self.state = _cartpole_step(self.state, action, self.p)
            x, th = self.state[:, 0], self.state[:, 2]
            term = (x < -2.4) | (x > 2.4) | (th < -12 * 2 * math.pi / 360) | (th > 12 * 2 * math.pi / 360)
            return self.obs(), np.ones(self.n, dtype=np.float32), term
        self.state = _acrobot_step(self.state, action, self.p)
        s = self.state
        term = -np.cos(s[:, 0]) - np.cos(s[:, 1] + s[:, 0]) > 1.0
        return self.obs(), np.where(term, 0.0, -1.0).astype(np.float32), term


def _cartpole_step(s: np.ndarray, a: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    masspole, length, tau = 0.1, 0.5, 0.02
    total_mass = masspole + p["masscart"]
    polemass_length = masspole * length
    x, x_dot, th, th_dot = s.T
    force = np.where(a == 1, p["force_mag"], -p["force_mag"])
    cos, sin = np.cos(th), np.sin(th)
    temp = (force + polemass_length * th_dot**2 * sin) / total_mass
    thacc = (p["gravity"] * sin - cos * temp) / (length * (4.0 / 3.0 - masspole * cos**2 / total_mass))
    xacc = temp - polemass_length * thacc * cos / total_mass
    return np.stack([x + tau * x_dot, x_dot + tau * xacc, th + tau * th_dot, th_dot + tau * thacc], axis=1)


def _acrobot_dsdt(s: np.ndarray, torque: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    m1, m2 = p["mass1"], p["mass2"]
    l1 = p["link_length"]
    lc1 = lc2 = 0.5 * p["link_length"]
    i1 = i2 = 1.0
    g = 9.8
    th1, th2, dth1, dth2 = s.T
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(th2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * np.cos(th2)) + i2
    phi2 = m2 * lc2 * g * np.cos(th1 + th2 - math.pi / 2.0)
    phi1 = (-m2 * l1 * lc2 * dth2**2 * np.sin(th2) - 2 * m2 * l1 * lc2 * dth2 * dth1 * np.sin(th2)
            + (m1 * lc1 + m2 * l1) * g * np.cos(th1 - math.pi / 2) + phi2)
    ddth2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dth1**2 * np.sin(th2) - phi2) / (m2 * lc2**2 + i2 - d2**2 / d1)
    ddth1 = -(d2 * ddth2 + phi1) / d1
    return np.stack([dth1, dth2, ddth1, ddth2], axis=1)


def _wrap(x: np.ndarray) -> np.ndarray:
    return (x + math.pi) % (2 * math.pi) - math.pi


def _acrobot_step(s: np.ndarray, a: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """One RK4 step of dt = 0.2 (Gymnasium's ``rk4`` over [0, dt]), then wrap angles and bound velocities."""
    dt = 0.2
    torque = np.asarray(a, dtype=np.float64) - 1.0  # actions {0,1,2} -> torques {-1,0,+1}
    k1 = _acrobot_dsdt(s, torque, p)
    k2 = _acrobot_dsdt(s + dt / 2 * k1, torque, p)
    k3 = _acrobot_dsdt(s + dt / 2 * k2, torque, p)
    k4 = _acrobot_dsdt(s + dt * k3, torque, p)
    ns = s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    ns[:, 0] = _wrap(ns[:, 0])
    ns[:, 1] = _wrap(ns[:, 1])
    ns[:, 2] = np.clip(ns[:, 2], -4 * math.pi, 4 * math.pi)
    ns[:, 3] = np.clip(ns[:, 3], -9 * math.pi, 9 * math.pi)
    return ns


# ------------------------------------------------------------------------------------------------ experts
@dataclass
class LinearExperts:
    """m linear greedy experts ``g_i(s) = argmax_a (W_i obs + c_i)_a`` made p_min-greedy (paper §B.1 step 4).

    ``W`` [m, A, D], ``c`` [m, A]. Ties break to the lowest action index (``np.argmax``), a fixed public rule.
    ``variant`` [m] says which physics variant each expert was trained on (diagnostic only).
    """

    W: np.ndarray
    c: np.ndarray
    p_min: float = 0.02
    variant: np.ndarray | None = None

    def __post_init__(self) -> None:
        n_act = self.W.shape[1]
        if not (0 < self.p_min and (n_act - 1) * self.p_min < 1):
            raise InvalidData(f"p_min must satisfy 0 < p_min and (|A|-1)·p_min < 1, got {self.p_min} with |A|={n_act}")

    @property
    def m(self) -> int:
        return int(self.W.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.W.shape[1])

    @property
    def p_hi(self) -> float:
        return 1.0 - (self.n_actions - 1) * self.p_min

    def subset(self, idx: np.ndarray) -> "LinearExperts":
        idx = np.asarray(idx)
        return LinearExperts(self.W[idx], self.c[idx], self.p_min, None if self.variant is None else self.variant[idx])

    def greedy_all(self, obs: np.ndarray) -> np.ndarray:
        """Greedy action of every expert at every state: [m, n]."""
        scores = np.einsum("mad,nd->mna", self.W, np.asarray(obs, dtype=np.float64)) + self.c[:, None, :]
        return scores.argmax(-1)

    def greedy_own(self, obs: np.ndarray, expert: np.ndarray) -> np.ndarray:
        """Greedy action of expert ``expert[j]`` at state ``obs[j]``: [n]."""
        scores = np.einsum("nad,nd->na", self.W[expert], np.asarray(obs, dtype=np.float64)) + self.c[expert]
        return scores.argmax(-1)

    def log_probs(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log π̃_i(a_j | s_j) for every expert i and step j: [m, k] (the count's building block, Alg. 1 line 1)."""
        g = self.greedy_all(obs)
        return np.where(g == np.asarray(actions)[None, :], math.log(self.p_hi), math.log(self.p_min))

    def sample(self, obs: np.ndarray, expert: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw a ~ π̃_{expert[j]}(·|obs[j]) (greedy w.p. p_hi, each other action w.p. p_min)."""
        g = self.greedy_own(obs, expert)
        u = rng.random(len(g))
        other = rng.integers(0, self.n_actions - 1, size=len(g))
        other = other + (other >= g)  # a uniformly random non-greedy action
        return np.where(u < self.p_hi, g, other)


def _rollout_returns(env: str, params: dict[str, np.ndarray], W: np.ndarray, c: np.ndarray, seed: int,
                     horizon: int) -> np.ndarray:
    """Undiscounted return of greedy linear policy row b on physics row b (one episode each)."""
    venv = VecClassicEnv(env, len(W), params, seed)
    obs = venv.reset()
    alive = np.ones(len(W), dtype=bool)
    ret = np.zeros(len(W))
    for _ in range(horizon):
        a = (np.einsum("nad,nd->na", W, obs) + c).argmax(-1)
        obs, r, term = venv.step(a)
        ret += np.where(alive, r, 0.0)
        alive &= ~term
        if not alive.any():
            break
    return ret


def _cem(env: str, params: dict[str, np.ndarray], mu: np.ndarray, sd: np.ndarray, candidates: int, rounds: int,
         keep: int, rng: np.random.Generator, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Cross-entropy search, one independent search per row of ``mu`` [V, A, D+1] on physics row v.

    Returns the last round's candidates [V, C, A, D+1] sorted best first, and their returns [V, C]."""
    V, A, D1 = mu.shape
    par = {k: np.repeat(v, candidates) for k, v in params.items()}
    for r in range(rounds):
        theta = mu[:, None] + sd[:, None] * rng.standard_normal((V, candidates, A, D1))
        flat = theta.reshape(V * candidates, A, D1)
        ret = _rollout_returns(env, par, flat[..., :-1], flat[..., -1], int(rng.integers(2**31)), horizon)
        ret = ret.reshape(V, candidates)
        order = np.argsort(-ret, axis=1, kind="stable")
        theta = np.take_along_axis(theta, order[:, :, None, None], axis=1)
        ret = np.take_along_axis(ret, order, axis=1)
        elite = theta[:, : max(keep, candidates // 4)]
        mu, sd = elite.mean(1), elite.std(1) + 0.02
    return theta, ret


def train_linear_experts(env: str, *, per_factor: int = 10, keep: int = 3, candidates: int = 16, rounds: int = 3,
                         p_min: float = 0.02, warm_start: bool = True, init_sd: float = 0.5,
                         seed: int = 0) -> LinearExperts:
    """Linear greedy experts by cross-entropy search on each variant; keep the ``keep`` best of the last round.

    Stands in for the paper's PPO grid (top 3 per variant → 3000 experts). With ``warm_start`` (default) a shared
    search on the default physics first finds one good controller θ* (normalised to unit std), and every variant's
    search starts from N(θ*, init_sd²): like PPO runs that converge to similar controllers, the experts then share a
    strategy but differ in details and in quality. Without it every variant searches from N(0, 1) and the experts
    barely agree on anything (the stable set is then empty; measured in docs/expert_svt.md). Each candidate is scored
    by one episode on its own variant (horizon = data horizon).
    """
    spec = get_spec(env)
    grid = variant_grid(env, per_factor)
    n_var = len(next(iter(grid.values())))
    rng = np.random.default_rng(seed)
    A, D = spec.n_actions, spec.obs_dim
    if warm_start:
        default = {k: np.array([v]) for k, v in spec.defaults.items()}
        theta0, _ = _cem(env, default, np.zeros((1, A, D + 1)), np.ones((1, A, D + 1)), 256, 6, 3, rng,
                         spec.horizon)
        star = theta0[0, 0] / (theta0[0, 0].std() + 1e-12)
        mu = np.broadcast_to(star, (n_var, A, D + 1)).copy()
        sd = np.full((n_var, A, D + 1), init_sd)
    else:
        mu, sd = np.zeros((n_var, A, D + 1)), np.ones((n_var, A, D + 1))
    theta, _ = _cem(env, grid, mu, sd, candidates, rounds, keep, rng, spec.horizon)
    best = theta[:, :keep].reshape(n_var * keep, A, D + 1)
    return LinearExperts(best[..., :D].copy(), best[..., D].copy(), p_min, np.repeat(np.arange(n_var), keep))


# ------------------------------------------------------------------------------------------------ data
@dataclass
class ExpertData:
    """Expert-tagged offline data (flat transitions, episodes contiguous).

    ``actions`` are integer action indices (a 1-column float copy is what :meth:`to_offline_dataset` stores in the
    shared :class:`~privsynth.data.dataset.OfflineDataset`). ``expert`` [n] is the generating expert's id, and
    ``ep_start``/``ep_len``/``ep_expert`` describe episodes. ``terminals`` are real terminations only.
    """

    env: str
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminals: np.ndarray
    expert: np.ndarray
    ep_start: np.ndarray
    ep_len: np.ndarray
    ep_expert: np.ndarray
    n_experts: int
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(len(self.actions))

    @property
    def n_episodes(self) -> int:
        return int(len(self.ep_len))

    @property
    def max_len(self) -> int:
        return int(self.ep_len.max()) if len(self.ep_len) else 0

    def episode_slice(self, e: int) -> slice:
        return slice(int(self.ep_start[e]), int(self.ep_start[e] + self.ep_len[e]))

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """Transitions ``idx`` as a dict of arrays (obs, actions, rewards, next_obs, terminals, expert)."""
        return dict(obs=self.obs[idx], actions=self.actions[idx], rewards=self.rewards[idx],
                    next_obs=self.next_obs[idx], terminals=self.terminals[idx], expert=self.expert[idx])

    def to_offline_dataset(self, name: str = "expert-data"):
        """The shared dataset model (marked sensitive). Discrete actions become a 1-column float array; the expert id
        of each episode is kept in ``info.extra['episode_expert']``."""
        from privsynth.data.dataset import DatasetInfo, OfflineDataset

        ep_ids = np.repeat(np.arange(self.n_episodes), self.ep_len)
        info = DatasetInfo(name=name, env_id=f"privsynth-{self.env}", sensitive=True,
                           extra=dict(episode_expert=self.ep_expert.tolist(), discrete_actions=True,
                                      n_actions=get_spec(self.env).n_actions))
        return OfflineDataset(observations=self.obs, actions=self.actions.astype(np.float32)[:, None],
                              rewards=self.rewards, next_observations=self.next_obs, terminals=self.terminals,
                              timeouts=np.zeros(len(self), dtype=bool), episode_ids=ep_ids, info=info)


def collect_expert_data(env: str, experts: LinearExperts, n_traj_per_expert: int = 2, seed: int = 0,
                        horizon: int | None = None) -> ExpertData:
    """Roll every p_min-greedy expert out ``n_traj_per_expert`` times in the default environment (paper §B.1 step 5)."""
    spec = get_spec(env)
    horizon = horizon or spec.horizon
    rng = np.random.default_rng(seed)
    who = np.repeat(np.arange(experts.m), n_traj_per_expert)
    B = len(who)
    venv = VecClassicEnv(env, B, None, int(rng.integers(2**31)))
    obs = venv.reset()
    O = np.zeros((horizon, B, spec.obs_dim), np.float32)
    NO = np.zeros_like(O)
    Aa = np.zeros((horizon, B), np.int64)
    R = np.zeros((horizon, B), np.float32)
    Tm = np.zeros((horizon, B), bool)
    alive = np.ones(B, bool)
    length = np.zeros(B, np.int64)
    for t in range(horizon):
        a = experts.sample(obs, who, rng)
        nobs, r, term = venv.step(a)
        O[t], Aa[t], R[t], NO[t], Tm[t] = obs, a, r, nobs, term
        length += alive
        alive &= ~term
        obs = nobs
        if not alive.any():
            break
    mask = np.arange(horizon)[:, None] < length[None, :]  # [H, B]
    order = np.nonzero(mask.T)  # episode-major
    pick = lambda X: X.transpose(1, 0, *range(2, X.ndim))[order]  # noqa: E731
    starts = np.concatenate([[0], np.cumsum(length)[:-1]])
    return ExpertData(env=env, obs=pick(O), actions=pick(Aa), rewards=pick(R), next_obs=pick(NO),
                      terminals=pick(Tm), expert=np.repeat(who, length), ep_start=starts, ep_len=length,
                      ep_expert=who, n_experts=experts.m,
                      meta=dict(n_traj_per_expert=n_traj_per_expert, horizon=horizon, p_min=experts.p_min))


@dataclass
class ExpertPoolConfig:
    """Scaled-down expert pool: 1000 variants × top 3 = 3000 linear experts, N = 2 trajectories each (paper App. B.1:
    3000 PPO experts, 20 trajectories each)."""

    env: str = "acrobot"
    per_factor: int = 10  # 10³ = 1000 variants (paper)
    keep: int = 3  # top-3 per variant (paper)
    candidates: int = 16  # CEM population per variant and round (paper: PPO grid)
    rounds: int = 3
    warm_start: bool = True  # shared warm start (see train_linear_experts)
    init_sd: float = 0.5
    p_min: float = 0.02  # paper §4.2
    n_traj_per_expert: int = 2  # paper: 20; the SVT pass looks at T ≤ 100 trajectories, so N barely matters
    seed: int = 0


def make_expert_pool(cfg: ExpertPoolConfig) -> tuple[LinearExperts, ExpertData]:
    experts = train_linear_experts(cfg.env, per_factor=cfg.per_factor, keep=cfg.keep, candidates=cfg.candidates,
                                   rounds=cfg.rounds, p_min=cfg.p_min, warm_start=cfg.warm_start,
                                   init_sd=cfg.init_sd, seed=cfg.seed)
    data = collect_expert_data(cfg.env, experts, cfg.n_traj_per_expert, seed=cfg.seed + 1)
    return experts, data


def default_env_returns(env: str, act_fn, n_episodes: int = 10, seed: int = 0) -> np.ndarray:
    """Returns of ``act_fn(obs [B, D]) -> actions [B]`` over ``n_episodes`` parallel episodes of the default ``env``,
    each at most its evaluation horizon (:func:`privsynth.rl.evaluate.evaluate_policy` on a :class:`VecClassicEnv`)."""
    return evaluate_policy(VecClassicEnv(env, n_episodes, None, seed), act_fn, max_steps=get_spec(env).eval_horizon)
