"""The hint `privsynth synthesize` prints when the DP fine-tune ran at a large noise multiplier (docs/transfer.md,
third round: sigma 2.25 closed little of the public-to-real gap, sigma 0.63 about half)."""
from __future__ import annotations

from types import SimpleNamespace

from privsynth.commands.synth import NOISY_SIGMA, noise_hint


def _synth(*runs):
    return SimpleNamespace(history=[{"phase": "pretrain"}, *runs])


def test_a_noisy_fine_tune_gets_a_hint_naming_sigma_and_no_count():
    h = noise_hint(_synth({"phase": "finetune", "private": True, "noise_multiplier": 2.25, "units_noisy": 20013.4,
                           "unit": "transition"}))
    assert h is not None and "2.25" in h and "docs/transfer.md" in h
    assert "20013" not in h and "20,013" not in h  # the unit count, even noisy, is not printed


def test_a_quiet_fine_tune_a_nonprivate_one_and_none_get_no_hint():
    assert noise_hint(_synth({"phase": "finetune", "private": True, "noise_multiplier": 0.63})) is None
    assert noise_hint(_synth({"phase": "finetune", "private": False, "noise_multiplier": None})) is None
    assert noise_hint(_synth()) is None
    assert noise_hint(SimpleNamespace()) is None  # a synthesizer without a history (baselines)


def test_only_the_last_private_run_counts():
    noisy = {"phase": "finetune", "private": True, "noise_multiplier": NOISY_SIGMA + 1}
    quiet = {"phase": "finetune", "private": True, "noise_multiplier": NOISY_SIGMA - 1}
    assert noise_hint(_synth(noisy, quiet)) is None and noise_hint(_synth(quiet, noisy)) is not None
