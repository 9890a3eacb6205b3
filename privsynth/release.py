"""Release of synthetic datasets: the guard checks the ledger against the budget, then the dataset is written to the
Minari store with its privacy card in the metadata (DESIGN invariants 3-5).

:func:`synthesize` is the whole PrivORL-n pipeline in one call: pre-train on public data (or load a shipped
pre-trained model), DP fine-tune on the sensitive data, sample from the EMA weights, and release.
Data flows data -> privacy -> synth -> release: this module may import all three.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence


from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.synth.base import Unit
from privsynth.synth.config import TransitionSynthConfig, demo_config
from privsynth.synth.pretrained import resolve_pretrained
from privsynth.synth.transition import TransitionSynthesizer

__all__ = ["release_dataset", "synthesize", "SynthesisResult", "as_dataset"]


def release_dataset(
    dataset: OfflineDataset,
    ledger: Any,
    dataset_id: str | None,
    *,
    epsilon_budget: float,
    delta: float | None = None,
    overwrite: bool = False,
) -> float:
    """Check the ledger against (``epsilon_budget``, ``delta``) and write ``dataset`` as ``dataset_id``.

    Refuses (raises) if the dataset carries no privacy card, if its card is not private (the no-privacy ablation),
    if the card's ledger differs from ``ledger``, or if the ledger spends more than the budget. With
    ``dataset_id=None`` only the checks run. Returns the spent ε.
    """
    from privsynth.privacy.guard import check_budget

    card = dataset.info.privacy_card
    if not card:
        raise PrivacyError(f"refusing to release '{dataset.info.name}': it carries no privacy card")
    if not card.get("private", False) or ledger is None:
        raise PrivacyError(f"refusing to release '{dataset.info.name}': it was not produced by an accounted DP mechanism")
    if card.get("ledger") != ledger.to_dict():
        raise PrivacyError(f"refusing to release '{dataset.info.name}': its privacy card does not match the ledger")
    spent = check_budget(ledger, epsilon_budget, delta)
    if dataset_id is not None:
        from privsynth.data.minari_io import write_dataset

        write_dataset(dataset, dataset_id, overwrite=overwrite)
    return spent


def as_dataset(ds: OfflineDataset | str) -> OfflineDataset:
    """A dataset object from an object or a Minari dataset id."""
    if isinstance(ds, OfflineDataset):
        return ds
    from privsynth.data.minari_io import load_dataset

    return load_dataset(str(ds))


@dataclass
class SynthesisResult:
    """What :func:`synthesize` returns: the released dataset, its ledger, the synthesizer and timings."""

    dataset: OfflineDataset
    ledger: Any
    synthesizer: TransitionSynthesizer
    dataset_id: str | None = None
    epsilon: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def synthesize(
    sensitive: OfflineDataset | str,
    *,
    epsilon: float,
    delta: float,
    public: Sequence[OfflineDataset | str] | OfflineDataset | str | None = None,
    unit: Unit = "transition",
    n: int = 100_000,
    config: TransitionSynthConfig | None = None,
    pretrained: str | Path | TransitionSynthesizer | None = None,
    pretrain: bool = True,
    out_dataset: str | None = None,
    overwrite: bool = False,
    workdir: str | Path | None = None,
    progress: bool = True,
) -> SynthesisResult:
    """PrivORL-n end to end: pretrain (public) -> DP fine-tune (sensitive) -> sample (EMA) -> guarded release.

    * ``pretrained``: a shipped name (``"pointmaze-umaze"``), a checkpoint path or a synthesizer; skips pre-training
      and reuses its public normaliser.
    * ``pretrain=False``: the DPDM ablation: the normaliser is still fitted on ``public``, the weights start random.
    * ``workdir``: stage checkpoints (``pretrained.pt``, ``finetuned.pt``) and the pre-training checkpoint; a rerun
      with the same ``workdir`` resumes from the last finished stage.
    * ``out_dataset``: a Minari id to write; the release guard refuses if the ledger's ε exceeds ``epsilon``.
    """
    from privsynth.privacy.accounting import check_delta, check_epsilon

    t_all = time.perf_counter()
    sens = as_dataset(sensitive).mark_sensitive(True)
    check_epsilon(epsilon)  # fail before any work: bad budgets are one-line errors
    check_delta(delta, sens.n_transitions if unit == "transition" else sens.n_episodes)
    if public is None:
        pubs: list[OfflineDataset] = []
    elif isinstance(public, (OfflineDataset, str)):
        pubs = [as_dataset(public)]
    else:
        pubs = [as_dataset(p) for p in public]
    wd = Path(workdir) if workdir else None
    seconds: dict[str, float] = {}
    done_pre = wd / "pretrained.pt" if wd else None
    done_fine = wd / "finetuned.pt" if wd else None

    if done_fine is not None and done_fine.exists():
        synth = TransitionSynthesizer.load(done_fine)
    else:
        t0 = time.perf_counter()
        if isinstance(pretrained, TransitionSynthesizer):
            synth = pretrained
        elif pretrained is not None:
            synth = TransitionSynthesizer.load(resolve_pretrained(pretrained))
            if config is not None:  # keep the pre-trained architecture, take the rest of the caller's config
                config = dataclasses.replace(config, denoiser=synth.config.denoiser, edm=synth.config.edm)
                synth.config = config
        elif done_pre is not None and done_pre.exists():
            synth = TransitionSynthesizer.load(done_pre)
        else:
            if not pubs:
                raise InvalidData("no public data: pass public datasets or a pre-trained synthesizer")
            synth = TransitionSynthesizer(config or demo_config())
            if pretrain:
                ckpt = wd / "pretrain-checkpoint.pt" if wd else None
                synth.pretrain(pubs, progress=progress, checkpoint=ckpt)
            else:
                synth.fit_public_stats(pubs)
            if done_pre is not None and pretrain:
                synth.save(done_pre)
        seconds["pretrain"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        synth.finetune(sens, epsilon, delta, unit, progress=progress)
        seconds["finetune"] = time.perf_counter() - t0
        if done_fine is not None:
            synth.save(done_fine)
    t0 = time.perf_counter()
    name = out_dataset or f"{sens.info.name}-synthetic-eps{epsilon:g}"
    ds = synth.sample(n, progress=progress, name=name)
    seconds["sample"] = time.perf_counter() - t0
    ledger = synth.ledger
    spent = None
    if synth.config.private:
        spent = release_dataset(ds, ledger, out_dataset, epsilon_budget=epsilon, delta=delta, overwrite=overwrite)
    elif out_dataset is not None:
        raise PrivacyError("refusing to release the output of the no-privacy ablation as a dataset")
    seconds["total"] = time.perf_counter() - t_all
    return SynthesisResult(dataset=ds, ledger=ledger, synthesizer=synth, dataset_id=out_dataset, epsilon=spent, seconds=seconds)
