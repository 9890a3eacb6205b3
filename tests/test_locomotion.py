"""MuJoCo locomotion datasets: shipped SAC policies re-measured, deterministic generation, validity, CLI errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.locomotion.generate import LocomotionConfig, NumpyPolicy, _schedule, generate_locomotion
from privsynth.data.locomotion.policies import load_actor, load_card, pretrained_dir, rollout_returns
from privsynth.data.locomotion.sac import SAC, Actor, ReplayBuffer
from privsynth.errors import InvalidData

SHIPPED = (pretrained_dir("halfcheetah") / "card.json").is_file()


@pytest.fixture
def fake_policies(tmp_path):
    """A policy directory with three untrained (seeded) HalfCheetah actors and a card, as the training script writes."""
    root = tmp_path / "loco"
    snaps = root / "halfcheetah" / "snapshots"
    snaps.mkdir(parents=True)
    entries = []
    for i, step in enumerate((1000, 2000, 3000)):
        torch.manual_seed(i)
        torch.save(Actor(17, 6).to_payload(), snaps / f"step_{step:07d}.pt")
        entries.append({"step": step, "file": f"snapshots/step_{step:07d}.pt", "eval_return": float(i)})
    card = {
        "command": "fake", "seed": 0, "steps_trained": 3000, "learning_starts": 1000, "snapshots": entries,
        "levels": {"medium": 2000, "expert": 3000},
        "reference": {"random_return": -300.0, "expert_return": 100.0},
    }
    (root / "halfcheetah" / "card.json").write_text(json.dumps(card))
    return root


def test_generation_deterministic_and_valid(fake_policies):
    cfg = LocomotionConfig(env="halfcheetah", kind="medium", steps=2300, seed=3, policy_root=str(fake_policies))
    a = generate_locomotion(cfg, progress=False)
    b = generate_locomotion(cfg, progress=False)
    c = generate_locomotion(LocomotionConfig(env="halfcheetah", kind="medium", steps=2300, seed=4,
                                             policy_root=str(fake_policies)), progress=False)
    for k in ("observations", "actions", "rewards", "next_observations", "timeouts", "episode_ids"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert not np.array_equal(a.actions, c.actions)
    assert a.n_transitions == 2300 and a.obs_dim == 17 and a.act_dim == 6
    assert not a.terminals.any()  # HalfCheetah never terminates
    assert np.flatnonzero(a.timeouts).tolist() == [999, 1999, 2299]  # 1000-step time limit + the cut-off tail
    assert np.bincount(a.episode_ids).tolist() == [1000, 1000, 300]
    inside = ~a.timeouts[:-1]  # continuity within episodes
    np.testing.assert_array_equal(a.next_observations[:-1][inside], a.observations[1:][inside])
    assert np.abs(a.actions).max() <= 1.0
    assert a.info.env_id == "HalfCheetah-v5" and a.info.obs_keys is None and a.info.env_kwargs == {}
    assert (a.info.ref_min_score, a.info.ref_max_score) == (-300.0, 100.0)


def test_medium_replay_schedule(fake_policies):
    card = load_card("halfcheetah", fake_policies)
    cfg = LocomotionConfig(kind="medium-replay", policy_root=str(fake_policies))
    # random until learning_starts (1000), then snapshot 1000 until the medium snapshot (2000)
    assert _schedule(cfg, card) == [(None, 1000), (1000, 1000)]
    cfg.steps = 301
    seg = _schedule(cfg, card)
    assert [s for s, _ in seg] == [None, 1000] and sum(m for _, m in seg) == 301
    ds = generate_locomotion(cfg, progress=False)
    assert ds.n_transitions == 301 and ds.info.extra["policy_segments"] == [list(s) for s in seg]
    me = _schedule(LocomotionConfig(kind="medium-expert", steps=11, policy_root=str(fake_policies)), card)
    assert me == [(2000, 5), (3000, 6)]


def test_numpy_policy_matches_torch_actor():
    torch.manual_seed(0)
    actor = Actor(17, 6)
    obs = np.random.default_rng(0).standard_normal(17).astype(np.float32)
    np.testing.assert_allclose(NumpyPolicy(actor)(obs, None), actor.act(obs, deterministic=True), atol=1e-5)


def test_sac_update_runs_and_learns_a_bandit():
    """One-step task, reward = -(a - 0.5)^2: a few hundred SAC updates move the mean action towards 0.5."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    agent = SAC(1, 1)
    buf = ReplayBuffer(1, 1, 2000)
    for _ in range(2000):
        a = rng.uniform(-1, 1, 1).astype(np.float32)
        buf.add(np.zeros(1), a, -float((a[0] - 0.5) ** 2), np.zeros(1), True)
    for _ in range(300):
        stats = agent.update(buf.sample(128, rng))
    assert np.isfinite(stats["q_loss"])
    assert abs(float(agent.actor.act(np.zeros(1))[0]) - 0.5) < 0.25


@pytest.mark.parametrize("env", ["halfcheetah", "walker2d", "hopper"])
def test_shipped_policy_returns_match_card(env):
    """Re-measure the card's reference returns on the first of its seeded episodes (same seed -> same episode)."""
    if not (pretrained_dir(env) / "card.json").is_file():
        pytest.skip(f"no shipped {env} policy")
    card = load_card(env)
    ref = card["reference"]
    seed, env_id = ref["seed"], card["env_id"]
    expert = rollout_returns(env_id, load_actor(env, card["levels"]["expert"]), 1, seed)[0]
    rand = rollout_returns(env_id, None, 1, seed)[0]
    tol = lambda m, s: 3 * s + 0.05 * abs(m) + 1.0  # noqa: E731
    assert abs(expert - ref["expert_return"]) <= tol(ref["expert_return"], ref["expert_return_std"])
    assert abs(rand - ref["random_return"]) <= tol(ref["random_return"], ref["random_return_std"]) + 50
    assert ref["expert_return"] > ref["medium_return"] > ref["random_return"]


def test_bench_runner_locomotion_source(fake_policies):
    """A suite can name ``{source: locomotion, ...}``: the runner's source is generate_locomotion itself."""
    from privsynth.evaluation.runner import _DATASET_SOURCES

    spec = dict(env="halfcheetah", kind="random", steps=150, seed=2, policy_root=str(fake_policies))
    a = _DATASET_SOURCES["locomotion"](**spec)
    b = generate_locomotion(LocomotionConfig(**spec), progress=False)
    np.testing.assert_array_equal(a.observations, b.observations)
    assert a.n_transitions == 150 and a.info.env_id == "HalfCheetah-v5"


@pytest.mark.skipif(not SHIPPED, reason="no shipped HalfCheetah policy")
def test_cli_make_locomotion(capsys):
    code = main(["datasets", "make", "locomotion", "--env", "halfcheetah", "--kind", "expert", "--steps", "1200",
                 "--quiet"])
    out, _ = capsys.readouterr()
    assert code == 0 and "privsynth/halfcheetah-expert-v0" in out
    ds = minari_io.load_dataset("halfcheetah-expert")
    assert ds.n_transitions == 1200 and ds.n_episodes == 2 and ds.info.env_id == "HalfCheetah-v5"
    assert ds.info.ref_max_score == pytest.approx(load_card("halfcheetah")["reference"]["expert_return"])


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--env", "ant"], "unknown locomotion env 'ant'"),
        (["--kind", "medium-ish"], "unknown dataset kind 'medium-ish'"),
        (["--steps", "0"], "steps must be at least 1"),
    ],
)
def test_cli_bad_input_exits_2(capsys, argv, needle):
    code = main(["datasets", "make", "locomotion", *argv, "--quiet"])
    _, err = capsys.readouterr()
    assert code == 2 and needle in err and "Traceback" not in err


def test_missing_policy_is_a_one_line_error(tmp_path):
    with pytest.raises(InvalidData, match="no trained policy"):
        generate_locomotion(LocomotionConfig(policy_root=str(tmp_path)), progress=False)


def test_walker2d_terminals_end_episodes(fake_policies):
    """Walker2d falls under random actions: terminals end episodes (not timeouts), ids follow them."""
    (fake_policies / "walker2d").symlink_to(fake_policies / "halfcheetah")  # same obs/act dims (17 / 6)
    ds = generate_locomotion(LocomotionConfig(env="walker2d", kind="random", steps=400, seed=0,
                                              policy_root=str(fake_policies)), progress=False)
    assert ds.info.env_id == "Walker2d-v5" and ds.terminals.any()
    assert not (ds.terminals & ds.timeouts).any()
    ends = np.flatnonzero(ds.terminals | ds.timeouts)
    assert ends[-1] == 399 and ds.n_episodes == len(ends)
    assert (np.diff(ds.episode_ids) == (ds.terminals | ds.timeouts)[:-1]).all()
