"""The replay test (issue 21): given everything a card says, an attacker who regenerates DP-SGD's noise and
subtracts it must not get an ε lower bound above the claimed ε. Before the noise moved to OS entropy the noise was
seeded by a seed on the card, and this attack reached the same bound as with the noise switched off."""
import json

import torch

from privsynth.privacy.dpsgd import DPSGDConfig
from privsynth.privacy.noise import NoiseSource
from privsynth.privacy.replay import replay_attack

CLAIM = 1.0


def _cfg(**kw) -> DPSGDConfig:
    return DPSGDConfig(target_epsilon=CLAIM, delta=1e-5, epochs=4, batch_size=50, grad_sample_mode="bk", **kw)


def test_replayable_noise_is_caught_by_the_attack():
    """Control: with the reproducible switch the attacker who knows the seed removes the noise (bound far above 1)."""
    audit, run = replay_attack(_cfg(noise_seed=123), lambda: NoiseSource.reproducible(123).torch_generator(),
                               claimed_epsilon=CLAIM, seed=1)
    assert run.event.params["noise"] == "reproducible"
    assert audit.epsilon_lower_bound > 2 * CLAIM, audit


def test_secure_noise_cannot_be_replayed_from_the_card():
    """Default engine: the card holds no seed; replaying with any seed an attacker can read or guess (the old default
    0, the canary seed) leaves a bound at or below the claim (95% confidence one-run bound)."""
    cfg = _cfg()
    for guess in (lambda: torch.Generator().manual_seed(0), lambda: NoiseSource.reproducible(0).torch_generator()):
        audit, run = replay_attack(cfg, guess, claimed_epsilon=CLAIM, seed=1)
        assert run.event.params["noise"] == "secure"
        card = json.dumps(run.event.to_dict())
        assert "seed" not in card
        assert audit.epsilon_lower_bound <= CLAIM, audit
