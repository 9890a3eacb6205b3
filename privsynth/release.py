"""Release of synthetic datasets: the guard checks the ledger against the budget, then the dataset is written to the
Minari store with its privacy card in the metadata (DESIGN invariants 3-5).

:func:`synthesize` is the whole PrivORL-n pipeline in one call: pre-train on public data (or load a shipped
pre-trained model), DP fine-tune on the sensitive data, sample from the EMA weights, and release.
Data flows data -> privacy -> synth -> release: this module may import all three.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivacyError, PrivsynthError, SpaceMismatch
from privsynth.synth.base import Unit
from privsynth.synth.config import TransitionSynthConfig, demo_config
from privsynth.synth.pretrained import resolve_pretrained
from privsynth.synth.transition import TransitionSynthesizer

__all__ = [
    "release_dataset",
    "synthesize",
    "SynthesisResult",
    "as_dataset",
    "environment_facts",
    "prepare_release",
    "check_release_request",
    "ENV_FACT_FIELDS",
    "load_synthesizer",
    "check_resume_files",
]

# What a release takes from the sensitive dataset's DatasetInfo: public facts of its environment (the id and kwargs
# that rebuild it, which Dict keys the columns hold, the action box, D4RL reference returns of a random and an expert
# policy on it). None is a statistic of the sensitive rows (DESIGN invariants 1, 7, 8).
ENV_FACT_FIELDS = ("env_id", "env_kwargs", "obs_keys", "action_low", "action_high", "ref_min_score", "ref_max_score")


def environment_facts(info: DatasetInfo) -> dict[str, Any]:
    """The :data:`ENV_FACT_FIELDS` of ``info`` (copied)."""
    return {k: copy.deepcopy(getattr(info, k)) for k in ENV_FACT_FIELDS}


def prepare_release(dataset: OfflineDataset, environment: DatasetInfo | None) -> OfflineDataset:
    """Post-processing of synthetic rows before release (free under DP): the environment's facts and support.

    With ``environment`` (the sensitive dataset's info): the release carries its :func:`environment_facts` (checked
    against the environment's spaces). Then rows are clipped to the support: actions to the action box (discrete
    actions rounded to a valid index), observations
    and next observations to the finite bounds of the observation space, and terminals cleared in an environment
    that never terminates (:func:`privsynth.data.envs.never_terminates`). Returns a new dataset.
    """
    from privsynth.data.envs import never_terminates, observation_bounds
    from privsynth.data.minari_io import check_env_spaces, env_spaces

    info = dataset.info
    if environment is not None:
        info = dataclasses.replace(info, **environment_facts(environment))
    check_env_spaces(info, dataset.obs_dim, dataset.act_dim)
    actions, obs, nxt, terminals = dataset.actions, dataset.observations, dataset.next_observations, dataset.terminals
    spaces = env_spaces(info)
    low = high = None
    if spaces is not None and isinstance(spaces[1], gym.spaces.Discrete):  # indices: round, then clip
        act_space = spaces[1]
        actions = np.rint(actions)
        low, high = np.array([act_space.start]), np.array([act_space.start + act_space.n - 1])
    elif spaces is not None:
        low, high = spaces[1].low, spaces[1].high
    elif info.action_low is not None and info.action_high is not None:
        low, high = np.asarray(info.action_low), np.asarray(info.action_high)
    if low is not None and high is not None:
        actions = np.clip(actions, low.astype(np.float32), high.astype(np.float32))
    if spaces is not None and isinstance(spaces[0], (gym.spaces.Box, gym.spaces.Dict)):
        olow, ohigh = observation_bounds(spaces[0], info.obs_keys)
        obs, nxt = np.clip(obs, olow, ohigh), np.clip(nxt, olow, ohigh)
    if never_terminates(info.env_id, info.env_kwargs):
        terminals = np.zeros_like(terminals)
    return dataclasses.replace(
        dataset, observations=obs, actions=actions, next_observations=nxt, terminals=terminals, info=info
    )


def check_release_request(
    out_dataset: str | None,
    *,
    overwrite: bool = False,
    n: int | None = None,
    sensitive_id: str | None = None,
    public_ids: Sequence[str] = (),
) -> None:
    """Cheap checks that must pass before any sensitive data is touched (raise one-line errors).

    The output id is well formed and free (unless ``overwrite``), ``n`` is positive, and no public id names the
    sensitive dataset.
    """
    from privsynth.data import minari_io

    if n is not None and n < 1:
        raise InvalidData(f"-n must be at least 1 (got {n})")
    if out_dataset is not None:
        full = minari_io.resolve_id(out_dataset, for_write=True)
        if minari_io.target_path(full).exists() and not overwrite:
            raise PrivsynthError(f"dataset '{full}' already exists; pass --overwrite to replace it")
    if sensitive_id is not None:
        sens_full = minari_io.resolve_id(sensitive_id)
        for pid in public_ids:
            if minari_io.resolve_id(pid) == sens_full:
                raise InvalidData(f"dataset '{sens_full}' cannot be both public and sensitive")


def release_dataset(
    dataset: OfflineDataset,
    ledger: Any,
    dataset_id: str | None,
    *,
    epsilon_budget: float,
    delta: float | None = None,
    overwrite: bool = False,
    environment: DatasetInfo | None = None,
) -> float:
    """Check the ledger against (``epsilon_budget``, ``delta``) and write ``dataset`` as ``dataset_id``.

    With ``environment`` (the sensitive dataset's info), the rows are post-processed by :func:`prepare_release` first.

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

        if environment is not None:
            dataset = prepare_release(dataset, environment)
        write_dataset(dataset, dataset_id, overwrite=overwrite)
    return spent


def check_public(public: OfflineDataset, sensitive: OfflineDataset) -> None:
    """Refuse public data that is sensitive, has other spaces, or shares any transition with ``sensitive``."""
    if public.info.sensitive:
        raise InvalidData(f"dataset '{public.info.name}' is marked sensitive and cannot be used as public data")
    public.check_compatible(sensitive)
    shared = public.shared_transitions(sensitive)
    if shared:
        raise InvalidData(
            f"public dataset '{public.info.name}' shares {shared} transitions with the sensitive dataset "
            f"'{sensitive.info.name}'; public data must not contain sensitive records"
        )


def check_model_fits(synth: Any, sensitive: OfflineDataset) -> None:
    """Raise :class:`SpaceMismatch` when a loaded synthesizer was built for other observation/action widths."""
    dims = (getattr(synth, "obs_dim", None), getattr(synth, "act_dim", None))
    if None not in dims and dims != (sensitive.obs_dim, sensitive.act_dim):
        raise SpaceMismatch(
            f"the synthesizer models obs/action dims {dims[0]}/{dims[1]} but '{sensitive.info.name}' has "
            f"{sensitive.obs_dim}/{sensitive.act_dim}"
        )


def record_dp_request(config: Any, epsilon: float, delta: float, unit: str) -> None:
    """Write the run's (ε, δ, unit) into ``config.dp``, so the config on the card is the one that ran."""
    dp = getattr(config, "dp", None)
    if dp is not None:
        dp.epsilon, dp.delta, dp.unit = float(epsilon), float(delta), unit


def load_synthesizer(path: str | Path) -> TransitionSynthesizer:
    """:meth:`TransitionSynthesizer.load` with one clear error naming a corrupted or truncated file."""
    try:
        return TransitionSynthesizer.load(path)
    except PrivsynthError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch/pickle raise many types for a damaged file
        raise InvalidData(
            f"cannot read checkpoint {path}: corrupted or truncated ({type(exc).__name__}); delete it or rerun "
            "with --overwrite"
        ) from None


def check_resume_files(paths: Sequence[Path], *, overwrite: bool, log: Any = print) -> None:
    """Refuse (or, with ``overwrite``, delete) resume files that do not load; say which resume files will be used."""
    import torch

    for path in paths:
        if not path.exists():
            continue
        try:
            torch.load(path, weights_only=False, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported the same way
            if not overwrite:
                raise InvalidData(
                    f"cannot read resume file {path}: corrupted or truncated ({type(exc).__name__}); delete it or "
                    "rerun with --overwrite"
                ) from None
            path.unlink()
            log(f"discarded unreadable resume file {path}")


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
    from privsynth.data.minari_io import check_env_spaces
    from privsynth.privacy.accounting import check_delta, check_epsilon

    t_all = time.perf_counter()
    check_epsilon(epsilon)  # fail before any work: bad budgets, names and sizes are one-line errors
    public_list = [] if public is None else [public] if isinstance(public, (OfflineDataset, str)) else list(public)
    check_release_request(
        out_dataset,
        overwrite=overwrite,
        n=n,
        sensitive_id=sensitive if isinstance(sensitive, str) else None,
        public_ids=[p for p in public_list if isinstance(p, str)],
    )
    wd = Path(workdir) if workdir else None
    seconds: dict[str, float] = {}
    done_pre = wd / "pretrained.pt" if wd else None
    done_fine = wd / "finetuned.pt" if wd else None
    if wd is not None:
        check_resume_files([done_fine, done_pre, wd / "pretrain-checkpoint.pt"], overwrite=overwrite)
    sens = as_dataset(sensitive).mark_sensitive(True)
    check_delta(delta, sens.n_transitions if unit == "transition" else sens.n_episodes)
    check_env_spaces(sens.info, sens.obs_dim, sens.act_dim)  # the release will carry this environment
    pubs = [as_dataset(p) for p in public_list]
    for pub in pubs:
        check_public(pub, sens)
    resumable = any(p is not None and p.exists() for p in (done_pre, done_fine))
    if not pubs and pretrained is None and not resumable:
        raise InvalidData("no public data: pass public datasets or a pre-trained synthesizer")
    if config is not None and not config.private and out_dataset is not None:
        raise PrivacyError("refusing to release the output of the no-privacy ablation as a dataset")

    if done_fine is not None and done_fine.exists():
        print(f"resuming from {done_fine}: DP fine-tuning already done, sampling")
        synth = load_synthesizer(done_fine)
        check_model_fits(synth, sens)
    else:
        t0 = time.perf_counter()
        if isinstance(pretrained, TransitionSynthesizer):
            synth = pretrained
        elif pretrained is not None:
            synth = load_synthesizer(resolve_pretrained(pretrained))
            check_model_fits(synth, sens)
            if config is not None:  # keep the pre-trained architecture, take the rest of the caller's config
                config = dataclasses.replace(config, denoiser=synth.config.denoiser, edm=synth.config.edm)
                synth.config = config
        elif done_pre is not None and done_pre.exists():
            print(f"resuming from {done_pre}: pre-training already done, DP fine-tuning")
            synth = load_synthesizer(done_pre)
            check_model_fits(synth, sens)
        else:
            if not pubs:
                raise InvalidData("no public data: pass public datasets or a pre-trained synthesizer")
            synth = TransitionSynthesizer(config or demo_config())
            if pretrain:
                ckpt = wd / "pretrain-checkpoint.pt" if wd else None
                if ckpt is not None and ckpt.exists():
                    print(f"resuming pre-training from {ckpt}")
                synth.pretrain(pubs, progress=progress, checkpoint=ckpt)
            else:
                synth.fit_public_stats(pubs)
            if done_pre is not None and pretrain:
                synth.save(done_pre)
        seconds["pretrain"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        record_dp_request(synth.config, epsilon, delta, unit)
        synth.finetune(sens, epsilon, delta, unit, progress=progress)
        seconds["finetune"] = time.perf_counter() - t0
        if done_fine is not None:
            synth.save(done_fine)
    t0 = time.perf_counter()
    name = out_dataset or f"{sens.info.name}-synthetic-eps{epsilon:g}"
    ds = prepare_release(synth.sample(n, progress=progress, name=name), sens.info)
    seconds["sample"] = time.perf_counter() - t0
    ledger = synth.ledger
    spent = None
    if synth.config.private:
        spent = release_dataset(ds, ledger, out_dataset, epsilon_budget=epsilon, delta=delta, overwrite=overwrite)
    elif out_dataset is not None:
        raise PrivacyError("refusing to release the output of the no-privacy ablation as a dataset")
    seconds["total"] = time.perf_counter() - t_all
    return SynthesisResult(dataset=ds, ledger=ledger, synthesizer=synth, dataset_id=out_dataset, epsilon=spent, seconds=seconds)
