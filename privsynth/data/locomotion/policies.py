"""Shipped SAC behaviour policies for the gymnasium MuJoCo locomotion envs (``pretrained/locomotion/<env>/``).

Layout of one env's directory (written by ``scripts/train_locomotion_policy.py``)::

    card.json             training command, seed, steps, snapshot list with their measured returns, levels
    snapshots/step_<N>.pt actor payloads (float16 weights) taken every K environment steps during training
    README.md             the card in words

``card["levels"]`` names the snapshot used as "medium" and "expert"; ``card["reference"]`` caches the random-policy
and expert-policy mean returns (the datasets' ``ref_min_score`` / ``ref_max_score``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from privsynth.data.envs import make_env
from privsynth.data.locomotion.sac import Actor
from privsynth.data.safe_files import read_json
from privsynth.errors import InvalidData
from privsynth.rl.evaluate import evaluate_policy

__all__ = ["ENVS", "pretrained_dir", "load_card", "load_actor", "rollout_returns", "env_id_of"]

ENVS: dict[str, str] = {"halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5", "hopper": "Hopper-v5"}
REPO_ROOT = Path(__file__).resolve().parents[3]


def env_id_of(env: str) -> str:
    env = str(env).lower()
    if env not in ENVS:
        raise InvalidData(f"unknown locomotion env '{env}'; choose one of {', '.join(ENVS)}")
    return ENVS[env]


def pretrained_dir(env: str, root: Path | None = None) -> Path:
    env_id_of(env)
    return (root or REPO_ROOT / "pretrained" / "locomotion") / env.lower()


def load_card(env: str, root: Path | None = None) -> dict[str, Any]:
    path = pretrained_dir(env, root) / "card.json"
    if not path.is_file():
        raise InvalidData(
            f"no trained policy for '{env}' at {path}; run scripts/train_locomotion_policy.py --env {env}"
        )
    card = read_json(path, f"the policy card {path}")
    _check_card(card, path)
    return card


def _check_card(card: Any, path: Path) -> None:
    """The parts of a policy card the generator reads, with their types (a damaged card is one line)."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    ok = (isinstance(card, dict) and isinstance(card.get("levels"), dict)
          and all(whole(card["levels"].get(k)) for k in ("medium", "expert"))
          and whole(card.get("learning_starts"))
          and isinstance(card.get("snapshots"), list)
          and all(isinstance(s, dict) and whole(s.get("step")) for s in card["snapshots"])
          and isinstance(card.get("reference", {}), dict))
    if not ok:
        raise InvalidData(f"the policy card {path} is damaged: it needs levels.medium/expert and learning_starts "
                          "(whole numbers), snapshots (a list of {step: N}) and a reference mapping")


def load_actor(env: str, step: int, root: Path | None = None) -> Actor:
    path = pretrained_dir(env, root) / "snapshots" / f"step_{step:07d}.pt"
    if not path.is_file():
        raise InvalidData(f"no policy snapshot at {path}")
    try:  # read as data (weights_only): tensors and plain types, never pickled objects
        return Actor.from_payload(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a damaged or mismatched file
        raise InvalidData(f"cannot read the policy snapshot {path}: damaged, or not an actor payload "
                          f"({type(exc).__name__})") from None


def rollout_returns(
    env_id: str,
    policy: Actor | None,
    episodes: int,
    seed: int,
    max_steps: int = 1000,
    deterministic: bool = True,
) -> np.ndarray:
    """Undiscounted returns of ``policy`` (None = uniform random) on ``env_id``, episode i reset with ``seed + i``."""
    env = make_env(env_id, max_episode_steps=max_steps)
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray) -> np.ndarray:
        if policy is None:
            return rng.uniform(-1.0, 1.0, size=(len(obs), *env.action_space.shape)).astype(np.float32)
        return policy.act(obs, deterministic=deterministic, rng=rng)

    try:
        return evaluate_policy(env, act, range(seed, seed + episodes))
    finally:
        env.close()


# D4RL's reference returns (random, expert) for the v2 MuJoCo tasks, quoted for comparison on the cards only.
D4RL_REFERENCE: dict[str, tuple[float, float]] = {"halfcheetah": (-280.2, 12135.0), "hopper": (-20.3, 3234.3),
                                                  "walker2d": (1.6, 4592.3)}


def write_card_readme(card: dict[str, Any], out: Path) -> Path:
    """``README.md`` beside ``card.json``: the card in words (what was trained, how, and the measured returns)."""
    ref, lv = card["reference"], card["levels"]
    snaps = "\n".join(f"| {s['step']} | {s['eval_return']:.1f} |" for s in card["snapshots"])
    d4rl_random, d4rl_expert = D4RL_REFERENCE[card["env"]]
    text = f"""# SAC behaviour policy: {card['env_id']}

Trained by `{card['command']}` (seed {card['seed']}) for **{card['steps_trained']} environment steps**
({card['train_seconds'] / 60:.1f} min on a shared CPU core; {card['learning_starts']} uniform-random steps first, then
one SAC update per step). Actor snapshots (float16 weights, `snapshots/`) every {card['snapshot_every']} steps.

Levels used by `privsynth datasets make locomotion --env {card['env']}`:

| level | snapshot step | mean return over {ref['episodes']} episodes (seeds {ref['seed']}..{ref['seed'] + ref['episodes'] - 1}, deterministic actions) |
|---|---|---|
| random (uniform actions) | - | {ref['random_return']:.1f} ± {ref['random_return_std']:.1f} |
| medium (earlier snapshot closest to {lv['medium_frac']} × best) | {lv['medium']} | {ref['medium_return']:.1f} ± {ref['medium_return_std']:.1f} |
| expert (best snapshot) | {lv['expert']} | {ref['expert_return']:.1f} ± {ref['expert_return_std']:.1f} |

These are *our* levels, below D4RL's ({card['env']}: random ≈ {d4rl_random:g}, expert ≈ {d4rl_expert:g}): the policy was
trained for minutes, not days. Datasets record random/expert here as `ref_min_score`/`ref_max_score`, so normalised scores are
relative to this policy, not comparable with D4RL's numbers.

Per-snapshot score during training (one deterministic episode, seed 10000, float32 weights):

| step | return |
|---|---|
{snaps}
"""
    path = out / "README.md"
    path.write_text(text)
    return path
