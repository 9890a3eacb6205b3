"""DP-SGD under ``torchrun`` with 2 processes (gloo, CPU) equals the 1-process run: σ, q, steps, ledger ε, weights.

The test launches this file itself with ``torchrun --standalone --nproc_per_node 2``; each rank runs the scenarios in
:func:`_scenarios` and rank 0 saves what it got; the test then runs the same scenarios in one process and compares.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from privsynth.privacy.dpsgd import DPSGDConfig, dp_train

# two torchrun-style processes are spawned once for the module (about 15-30 s of set-up): the slow suite
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
N, D, CLIP = 24, 3, 0.5
MODES = ("bk", "ghost", "hooks")


class Regression(nn.Module):
    """Per-unit squared error of a small MLP (Linear + LayerNorm: every clipping mode supports it)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(D, 8), nn.LayerNorm(8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.out(torch.tanh(self.norm(self.inp(x)))) - y).pow(2).sum(-1)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(N, D, generator=g) * 2, torch.randn(N, 2, generator=g)


def _model() -> Regression:
    torch.manual_seed(3)
    return Regression()


def _scenarios(init_seed_offset: int = 0) -> dict:
    """Run every scenario; ``init_seed_offset`` perturbs the local init (rank 0's weights must win the broadcast)."""
    items = _data()
    out: dict = {}
    for mode in MODES:
        # one full-batch step (q = 1), no noise, SGD with lr 1: the weight change is minus the clipped mean gradient
        model = _model()
        if init_seed_offset:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(init_seed_offset)
        before = [p.detach().clone() for p in model.parameters()]
        cfg = DPSGDConfig(epochs=1, batch_size=N, max_grad_norm=CLIP, noise_multiplier=0.0, grad_sample_mode=mode,
                          delta=1e-3)
        dp_train(model, items, cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0), n_units_noisy=N)
        out[f"grad/{mode}"] = [(b - p.detach()) for b, p in zip(before, model.parameters())]
        # a calibrated private run: Poisson batches of expected size 6 over 24 units, 8 steps (the caller's count;
        # the run's own count is shared by the ranks: test_two_process_run_shares_rank_zeros_unit_count)
        model = _model()
        cfg = DPSGDConfig(target_epsilon=3.0, delta=1e-3, epochs=2, batch_size=6, max_grad_norm=CLIP,
                          grad_sample_mode=mode, noise_seed=11)
        res = dp_train(model, items, cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1), n_units_noisy=N)
        out[f"private/{mode}"] = {
            "noise_multiplier": res.noise_multiplier, "sample_rate": res.sample_rate, "steps": res.steps,
            "epsilon": res.epsilon, "event": res.event.to_dict(), "batch_sizes": res.batch_sizes,
            "losses": res.losses, "world_size": res.world_size,
            "weights": [p.detach().clone() for p in model.parameters()],
        }
        # expected batch 1: most steps leave one rank (or both) with no unit, which must still join the all-reduce
        model = _model()
        cfg = DPSGDConfig(delta=1e-3, epochs=0.5, batch_size=1, max_grad_norm=CLIP, grad_sample_mode=mode, noise_seed=5,
                          noise_multiplier=1.0)
        res = dp_train(model, items, cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1), n_units_noisy=N)
        out[f"sparse/{mode}"] = {"batch_sizes": res.batch_sizes, "weights": [p.detach().clone() for p in model.parameters()]}
    # the run's own DP count of the units, from secure noise: every rank must train with rank 0's count
    model = _model()
    cfg = DPSGDConfig(target_epsilon=3.0, delta=1e-3, epochs=1, batch_size=6, max_grad_norm=CLIP, grad_sample_mode="bk")
    res = dp_train(model, items, cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
    out["count"] = {"n_units_noisy": res.event.params["n_units_noisy"], "sample_rate": res.sample_rate,
                    "steps": res.steps, "noise_multiplier": res.noise_multiplier}
    return out


def _worker(path: str) -> None:
    from privsynth.privacy import distributed as dist_dp

    torch.set_num_threads(1)
    group = dist_dp.init_from_env("gloo")
    assert group is not None and group.world_size == 2
    out = _scenarios(init_seed_offset=group.rank)
    if group.rank == 0:
        torch.save(out, path)
    dist_dp.shutdown()


@pytest.fixture(scope="module")
def two_process(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("dist") / "rank0.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).resolve()), str(path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "terminate called without an active exception" in proc.stderr:
        # a rank aborted in a C++ thread's teardown (seen once, on a loaded 2-core machine, with the same code that
        # passed before and after): launch once more; a second failure fails the fixture
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(path, weights_only=False)


@pytest.fixture(scope="module")
def one_process() -> dict:
    return _scenarios()


def _brute_force_clipped_mean(items) -> list[torch.Tensor]:
    """Each unit's gradient alone, clipped to CLIP, summed, divided by the batch: the DP-SGD update direction."""
    model = _model()
    total = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(N):
        model.zero_grad()
        model(*(t[i : i + 1] for t in items)).sum().backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        scale = min(1.0, CLIP / (float(norm) + 1e-12))
        for t, g in zip(total, grads):
            t.add_(g * scale)
    return [t / N for t in total]


@pytest.mark.parametrize("mode", MODES)
def test_two_process_gradient_is_single_process_clipping(two_process, one_process, mode):
    expected = _brute_force_clipped_mean(_data())
    assert any(float(e.abs().max()) > 1e-3 for e in expected)
    for got, single, ref in zip(two_process[f"grad/{mode}"], one_process[f"grad/{mode}"], expected):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(got, single, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_two_process_run_has_single_process_accounting_and_noise(two_process, one_process, mode):
    two, one = two_process[f"private/{mode}"], one_process[f"private/{mode}"]
    assert two["world_size"] == 2 and one["world_size"] == 1
    assert two["sample_rate"] == one["sample_rate"] == 6 / N
    assert two["steps"] == one["steps"] == 8
    assert two["noise_multiplier"] == one["noise_multiplier"] > 0
    assert math.isclose(two["epsilon"], one["epsilon"], rel_tol=1e-12) and one["epsilon"] <= 3.0
    assert two["event"] == one["event"]  # the ledger event, field by field
    assert two["batch_sizes"] == one["batch_sizes"]  # the same global Poisson draws, each unit used once
    for a, b in zip(two["losses"], one["losses"]):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    # the same seed draws the same noise: with one noise draw per step (not one per rank) the weights agree
    for a, b in zip(two["weights"], one["weights"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_ranks_with_empty_shards_still_step_together(two_process, one_process, mode):
    two, one = two_process[f"sparse/{mode}"], one_process[f"sparse/{mode}"]
    assert two["batch_sizes"] == one["batch_sizes"] and min(one["batch_sizes"]) <= 1 and len(one["batch_sizes"]) == 12
    for a, b in zip(two["weights"], one["weights"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_noise_is_really_added(one_process):
    """Guard against a vacuous comparison: the private run's weights differ from a noise-free run's."""
    items = _data()
    model = _model()
    cfg = DPSGDConfig(target_epsilon=3.0, delta=1e-3, epochs=2, batch_size=6, max_grad_norm=CLIP, grad_sample_mode="bk",
                      noise_seed=11, noise_multiplier=0.0)
    dp_train(model, items, cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1), n_units_noisy=N)
    diff = max(float((a - p.detach()).abs().max()) for a, p in zip(one_process["private/bk"]["weights"], model.parameters()))
    assert diff > 1e-2


def test_two_process_run_shares_rank_zeros_unit_count(two_process):
    """A run that counts its own units draws the count once, on rank 0, from secure noise: the other rank trains with
    the same Ñ (else its q, steps and σ would differ and dp_train's agreement check would stop the run)."""
    got = two_process["count"]
    assert got["n_units_noisy"] >= 1 and got["sample_rate"] == min(1.0, 6 / got["n_units_noisy"])
    assert got["steps"] == max(1, round(1 / got["sample_rate"])) and got["noise_multiplier"] > 0


if __name__ == "__main__":
    _worker(sys.argv[1])
