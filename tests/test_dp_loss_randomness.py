"""The randomness a DP-SGD loss draws itself (diffusion σ and noise, fragment and row picks) is as secret as the DP
noise (review F3). It shapes each unit's clipped gradient and is handed out by batch position, so if it were replayable
from a seed on the card (``config.seed``), adding one unit would move the others' clipped gradients in a way anyone
could recompute, and the sensitivity C behind the ledger's ε would not hold. ``dp_train`` therefore keys torch's
global RNG from its NoiseSource for the run (OS entropy; ``noise_seed`` replays it, NOT DP) and puts it back after.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from conftest import make_toy_dataset
from privsynth.privacy.dpsgd import DPSGDConfig, dp_train

N = 8


class DrawLoss(nn.Module):
    """Loss [B] that draws one uniform per unit from torch's global RNG (as the diffusion losses do) and keeps them."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 1)
        self.draws: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = torch.rand(x.shape[0])
        self.draws.append(u.clone())
        return self.lin(x).squeeze(-1).pow(2) * u


def _draws(noise_seed: int | None, public_seed: int = 0, on_step=None) -> torch.Tensor:
    """The loss draws of a full-batch run (q = 1: every step sees all N units, whatever the mask's key)."""
    torch.manual_seed(public_seed)  # what a card-printed config seed would set
    module = DrawLoss()
    cfg = DPSGDConfig(delta=1e-3, epochs=2, batch_size=N, noise_multiplier=1.0, grad_sample_mode="bk",
                      noise_seed=noise_seed)
    dp_train(module, (torch.arange(N * 3, dtype=torch.float32).reshape(N, 3) / 10,), cfg, on_step=on_step,
             n_units_noisy=N)
    return torch.cat(module.draws)


def test_secure_run_loss_draws_are_fresh_and_not_replayable_from_the_public_seed():
    a, b = _draws(None), _draws(None)
    assert a.shape == b.shape == (2 * N,)
    assert not torch.equal(a, b)  # same public seed, different draws: they come from OS entropy
    torch.manual_seed(0)
    assert not torch.equal(a[:N], torch.rand(N))  # and not the stream of the public seed


def test_noise_seed_replays_the_loss_draws_whatever_the_global_seed():
    a, b = _draws(3, public_seed=0), _draws(3, public_seed=1)
    assert torch.equal(a, b)  # reproducible tests: keyed by noise_seed alone
    assert not torch.equal(a, _draws(4))


def test_global_rng_is_put_back_after_training_and_after_a_failure():
    """Code after DP training (sampling, non-private phases) keeps drawing from the public seed's stream, and the
    secret key is not left in torch's global RNG."""
    torch.manual_seed(5)
    before = torch.get_rng_state()
    module = DrawLoss()
    expected = torch.get_rng_state()
    dp_train(module, (torch.randn(N, 3, generator=torch.Generator().manual_seed(0)),),
             DPSGDConfig(delta=1e-3, epochs=1, batch_size=N, noise_multiplier=1.0, grad_sample_mode="bk"))
    assert torch.equal(torch.get_rng_state(), expected) and not torch.equal(before, expected)

    def stop(step, loss):
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        _draws(None, public_seed=6, on_step=stop)
    after_failure = torch.get_rng_state()
    torch.manual_seed(6)
    DrawLoss()
    assert torch.equal(after_failure, torch.get_rng_state())


# ------------------------------------------------------------------------------------ through the synthesizers
def _first_sigma(monkeypatch, cls, run) -> torch.Tensor:
    """σ of the first loss evaluation inside ``run()``, by spying on ``cls.loss`` (σ is its ``sigma`` argument)."""
    seen: list[torch.Tensor] = []
    real = cls.loss

    def spy(self, *args):
        sigma = args[-2]  # loss(x0, sigma, noise) / loss(x0, cond, mask, sigma, noise)
        if not seen:
            seen.append(sigma.detach().clone())
        return real(self, *args)

    monkeypatch.setattr(cls, "loss", spy)
    run()
    monkeypatch.setattr(cls, "loss", real)
    return seen[0]


@pytest.fixture(scope="module")
def privorl_n():
    from privsynth.synth import TransitionSynthesizer
    from test_transition_synth import public_data, tiny_config

    torch.manual_seed(0)
    cfg = tiny_config()
    cfg.finetune.batch_size = 10_000  # capped at N: q = 1, one step, the same batch whatever the mask's key
    return TransitionSynthesizer(cfg).pretrain(public_data(), progress=False)


@pytest.fixture(scope="module")
def privorl_j():
    from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config

    cfg = tiny_config()
    cfg.pretrain_curiosity = False
    cfg.dp.batch_size = 10_000  # capped at the DP count of the 12 trajectories: q = 1
    torch.manual_seed(0)
    pub = make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=3, act_dim=2, seed=1)
    return TrajectorySynthesizer(cfg).pretrain(pub, progress=False)


def _finetune(synth, noise_seed, unit):
    s = copy.deepcopy(synth)
    s.config.noise_seed = noise_seed
    if unit == "trajectory":
        sens = make_toy_dataset(lengths=(7, 5, 6, 4, 8, 9, 5, 6, 7, 4, 8, 6), obs_dim=3, act_dim=2, seed=2,
                                sensitive=True)
    else:
        from test_transition_synth import sensitive_data

        sens = sensitive_data()

    def run():
        torch.manual_seed(s.config.seed)  # as a fresh process replaying the card's config would start
        s.finetune(sens, 5.0, 1e-2 if unit == "trajectory" else 1e-3, unit, progress=False)
    return run


@pytest.mark.parametrize("which", ["privorl-n", "privorl-j"])
def test_dp_finetune_loss_sigma_comes_from_the_secret_source(which, privorl_n, privorl_j, monkeypatch):
    """Same config seed (printed on the card), same data, the batch fixed (q = 1): the σ the loss draws in the first
    step differs between two DP fine-tunes, and is replayed exactly when ``noise_seed`` is fixed (not DP)."""
    from privsynth.synth.edm import EDM
    from privsynth.synth.trajectory.diffusion import FragmentEDM

    if which == "privorl-n":
        synth, cls, unit = privorl_n, EDM, "transition"
    else:
        synth, cls, unit = privorl_j, FragmentEDM, "trajectory"
    a = _first_sigma(monkeypatch, cls, _finetune(synth, None, unit))
    b = _first_sigma(monkeypatch, cls, _finetune(synth, None, unit))
    assert a.shape == b.shape and not torch.equal(a, b)
    c = _first_sigma(monkeypatch, cls, _finetune(synth, 9, unit))
    d = _first_sigma(monkeypatch, cls, _finetune(synth, 9, unit))
    assert torch.equal(c, d)
