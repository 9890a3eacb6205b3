"""One call from sensitive data to a guarded release, for any registered synthesizer (``privsynth synthesize``).

``synth="privorl-n"`` (default) runs the PrivORL-n pipeline with its extras (shipped pre-trained models, staged and
resumable work directories, the DPDM ablation); any other registered name (:mod:`privsynth.synth.registry`) runs
make -> fit (pre-train on public data, DP fine-tune) -> sample -> guarded release, the same way for all of them.

Why this module is long: it is the one route from sensitive data to a DP artifact (issue 38), so the CLI, the bench
cells, the aliases and the scripts all pass through it; its request checks live in release.checks and its writer in
privacy.guard, and what remains is the route itself (staged / registered branches by capability, timings, warnings).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy.budget import Budget, as_budget
from privsynth.release.checks import (
    as_dataset,
    check_model_fits,
    check_pretrained_public,
    check_public,
    check_release_request,
    check_resume_files,
    load_synthesizer,
    record_dp_request,
)
from privsynth.release.guarded import release_dataset
from privsynth.release.support import prepare_release
from privsynth.synth.base import Unit
from privsynth.synth.config import demo_config, on_checkpoint
from privsynth.synth.pretrained import pretrained_card, resolve_pretrained
from privsynth.synth.transition import TransitionSynthesizer

__all__ = ["SynthesisResult", "synthesize"]

@dataclass
class SynthesisResult:
    """What :func:`synthesize` returns: the released dataset, its ledger, the synthesizer and timings."""

    dataset: OfflineDataset | None  # None for an n=0 request (the fine-tuned model alone)
    ledger: Any
    synthesizer: Any  # the fitted synthesizer (TransitionSynthesizer for privorl-n)
    dataset_id: str | None = None
    epsilon: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # released values that break the schema (:func:`_schema_check`)


def synthesize(
    sensitive: OfflineDataset | str,
    *,
    budget: Budget | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    public: Sequence[OfflineDataset | str] | OfflineDataset | str | None = None,
    unit: Unit | None = None,
    n: int = 100_000,
    synth: str = "privorl-n",
    preset: str | None = None,
    config: Any = None,
    pretrained: str | Path | TransitionSynthesizer | None = None,
    pretrain: bool = True,
    out_dataset: str | None = None,
    overwrite: bool = False,
    workdir: str | Path | None = None,
    progress: bool = True,
    normalizer_epsilon: float | None = None,
    obs_bounds: tuple[float, float] | None = None,
    reward_bounds: tuple[float, float] | None = None,
    postprocess: bool | str | Sequence[str] = "auto",
    topup: bool = True,
    episodes: int | None = None,
    layout: str = "transitions",
    warm_start: float | None = None,
    policy_share: float | str | None = "auto",
) -> SynthesisResult:
    """Any registered synthesizer end to end: pretrain (public) -> DP fine-tune (sensitive) -> sample -> guarded release.

    * ``synth``: a name from :func:`privsynth.synth.registry.names` (default ``privorl-n``); ``preset`` picks its
      preset (``cpu``, ``paper``, ``tiny``; privorl-n defaults to ``demo`` when neither preset nor config is given)
      and ``config`` passes a config object of that synthesizer. The options below marked PrivORL-n exist for it only.
    * ``budget``: the privacy request, a :class:`privsynth.privacy.Budget` (ε, δ, unit), or its three parts as
      ``epsilon``, ``delta``, ``unit``; built and validated once here.
    * ``unit``: the privacy unit; default the synthesizer's first (``transition`` for privorl-n and the baselines,
      ``trajectory`` for the trajectory synthesizers), as ``privsynth synthesize`` infers it.

    * ``pretrained`` (PrivORL-n): a shipped name (``"pointmaze-umaze"``), a checkpoint path or a synthesizer; skips pre-training
      and reuses its public normaliser.
    * ``pretrain=False`` (PrivORL-n): the DPDM ablation: the normaliser is still fitted on ``public``, the weights start random.
    * ``workdir`` (PrivORL-n): stage checkpoints (``pretrained.pt``, ``finetuned.pt``) and the pre-training checkpoint; a rerun
      with the same ``workdir`` resumes from the last finished stage.
    * No public data (PrivORL-n): data with a schema, or simulator data whose environment bounds its columns
      (its spaces, ``obs_bounds`` where they have none, ``reward_bounds`` or the reward bounds known from the
      environment's code), trains from scratch with those bounds as normaliser and clipping (public facts, free);
      the release carries them as its schema.
    * ``normalizer_epsilon`` (PrivORL-n, no public data): spend this part of ``epsilon`` on a DP normaliser (clipped
      mean and std within public bounds: the environment spec's, ``obs_bounds`` where it has none, and
      ``reward_bounds``, or the schema's), charged to the ledger; DP-SGD gets the rest. The weights start untrained
      (DPDM). With a schema and no public data or model it defaults to
      :data:`~privsynth.synth.scratch.SCRATCH_NORMALIZER_SHARE` of ``epsilon``; ``0`` spends nothing on it and
      normalises by the schema's bounds alone.
    * ``warm_start`` (PrivORL-n, no public data): spend this share of ``epsilon`` on a DP summary of the sensitive
      transitions (PrivSyn on the public bounds), pre-train on rows drawn from it (free), then DP fine-tune with the
      rest; every event on the ledger (:mod:`privsynth.synth.warmstart`). Default with no public data and no
      pre-trained model at the transition unit: :data:`~privsynth.synth.warmstart.WARM_START_SHARE` (0: off, as
      measured on the umaze proxy, docs/transfer.md).
    * ``out_dataset``: a Minari id to write; the release guard refuses if the ledger's ε exceeds ``epsilon``.
      ``None``: nothing written, the guard's checks only (the benchmark's cells save the rows themselves); then
      ``n=0`` samples nothing (``result.dataset`` is None): the fine-tuned model alone, its ledger checked.
    * ``episodes``: for a synthesizer whose output is whole episodes (``registry.Entry.episodes``: privorl-j, ...),
      release this many episodes instead of ``n`` transitions.
    * ``result.seconds``: ``pretrain``, ``finetune`` (with the sensitive set read: the holder's figure), ``sample``,
      ``layout`` (transition-level releases), ``total``; a registered synthesizer's also ``fit`` (pre-train + fine-tune).
    * ``postprocess``: repair the sampled rows with the public environment before the release
      (:func:`privsynth.release.postprocess.postprocess`; free under DP, recorded in the privacy card); ``True`` for
      every step, or the steps to apply, e.g. ``"clip,reward"``; ``False`` none. The default ``"auto"`` applies
      :data:`privsynth.release.postprocess.LOCOMOTION_DEFAULT` (the simulator repair) to transition-unit row
      releases in a MuJoCo locomotion environment (chosen on the transfer proxies, docs/transfer.md "Fourth round"
      and "Eighth round"; with ``rollout`` at ``epsilon`` <= :data:`~privsynth.release.postprocess.LOW_EPSILON`,
      "Ninth round"), :data:`~privsynth.release.postprocess.SCRATCH_MAZE_DEFAULT` (every repair, then rollouts)
      to a PointMaze release learnt from scratch ("Seventh round"), and nothing elsewhere
      (:func:`~privsynth.release.postprocess.default_steps`). With ``topup`` (default) a step that drops rows is
      made up for by more draws from the same released model, so the release still holds ``n`` rows
      (:func:`privsynth.release.postprocess.topped_up`; free under DP too); ``topup=False`` keeps what is left.
    * ``policy_share`` (PrivORL-n): spend this share of ``epsilon`` on a DP behaviour policy that relabels the
      sampled actions before the simulator repair re-simulates each row (:mod:`privsynth.release.relabel`); the
      fine-tune gets the rest. ``"auto"``: :data:`~privsynth.release.relabel.POLICY_SHARE` where the post-processing
      re-simulates rows in a MuJoCo locomotion environment (measured there), else 0.
    * ``layout`` (transition-level releases): ``transitions`` (default: one Minari episode per transition, the rows
      exactly), ``chained`` (the rows ordered into episodes, each next row's state snapped to the previous row's next
      state; about 1.5x the source's bytes instead of 7.7x, at a cost in dynamics) or ``auto``: chained above
      :data:`privsynth.release.layout.CHAIN_THRESHOLD` transitions (:mod:`privsynth.release.layout`; free under DP).
      Trajectory-level releases are episodes already and keep theirs.
    """
    from privsynth.data.minari_io import check_env_spaces

    t_all = time.perf_counter()
    from privsynth.synth import registry

    # fail before any work: bad budgets, names and sizes are one-line errors; the request is built once, here
    budget = as_budget(budget, epsilon=epsilon, delta=delta, unit=unit,
                       default_unit=registry.entry(synth).units[0])  # an unknown name fails here, before any data
    epsilon, delta, unit = budget.epsilon, budget.delta, budget.unit
    if postprocess and postprocess != "auto":
        from privsynth.release.postprocess import step_options

        step_options(postprocess)  # unknown step names: before any data is read
    public_list = [] if public is None else [public] if isinstance(public, (OfflineDataset, str)) else list(public)
    if n == 0 and out_dataset is not None:
        raise InvalidData("-n must be at least 1 to write a dataset (n=0 fine-tunes only, with out_dataset=None)")
    if episodes is not None and (not registry.entry(synth).episodes or isinstance(episodes, bool) or episodes < 1):
        raise InvalidData(f"episodes must be a positive number of whole episodes of a synthesizer that makes them "
                          f"({', '.join(e for e in registry.names() if registry.entry(e).episodes)}), got "
                          f"{episodes!r} for {synth}")
    from privsynth.release.layout import resolve_layout

    resolve_layout(layout, n)  # an unknown layout fails here, before any data
    if episodes is not None and postprocess and postprocess != "auto":
        raise InvalidData("postprocess tops up rows, not episodes: ask for n transitions, or drop postprocess")
    check_release_request(
        out_dataset,
        overwrite=overwrite,
        n=n or None,
        sensitive_id=sensitive if isinstance(sensitive, str) else None,
        public_ids=[p for p in public_list if isinstance(p, str)],
    )
    registry.check_unit(synth, unit)
    # what the request asks of the route, by capability (registry.Entry.capabilities), never by name
    asked = {"pretrained": ("pretrained", pretrained is not None), "pretrain=False": ("no_pretrain", not pretrain),
             "workdir": ("staged", workdir is not None), "normalizer_epsilon": ("dp_normalizer", normalizer_epsilon is not None),
             "obs_bounds": ("public_bounds", obs_bounds is not None),
             "reward_bounds": ("public_bounds", reward_bounds is not None),
             "warm_start": ("warm_start", bool(warm_start)),
             "policy_share": ("policy_relabel", policy_share not in ("auto", None, 0, 0.0))}
    caps = registry.entry(synth).capabilities
    if "staged" not in caps:
        return _synthesize_registered(
            synth, sensitive, public_list, epsilon=epsilon, delta=delta, unit=unit, n=n, preset=preset, config=config,
            out_dataset=out_dataset, overwrite=overwrite, progress=progress, t_all=t_all, postprocess=postprocess,
            topup=topup, episodes=episodes, layout=layout, obs_bounds=obs_bounds, reward_bounds=reward_bounds,
            unsupported={k: v for k, (cap, v) in asked.items() if cap not in caps})
    if config is None and preset is not None:
        config = registry.make(synth, preset=preset).config
    wd = Path(workdir) if workdir else None
    seconds: dict[str, float] = {}
    done_pre = wd / "pretrained.pt" if wd else None
    done_fine = wd / "finetuned.pt" if wd else None
    if wd is not None:
        check_resume_files([done_fine, done_pre, wd / "pretrain-checkpoint.pt"], overwrite=overwrite)
    sens = as_dataset(sensitive).mark_sensitive(True)
    budget.check_dataset(sens)
    check_env_spaces(sens.info, sens.obs_dim, sens.act_dim)  # the release will carry this environment
    from privsynth.release.postprocess import default_steps
    from privsynth.release.relabel import resolve_policy_share

    # public facts: the environment's simulator (one environment made) and whether anything public is learnt from
    env_default = default_steps(sens.info, from_scratch=not public_list and pretrained is None, epsilon=epsilon)
    postprocess = _check_postprocess(sens.info, postprocess, unit=unit, episodes=episodes, auto=env_default)
    policy_epsilon = epsilon * resolve_policy_share(policy_share, steps=postprocess, unit=unit, n=n,
                                                    repaired_by_default=env_default is not None)
    pubs = [as_dataset(p) for p in public_list]
    for pub in pubs:
        check_public(pub, sens)
    resumable = any(p is not None and p.exists() for p in (done_pre, done_fine))
    if normalizer_epsilon == 0:  # explicit: no DP normaliser (a schema's bounds, the PR 39 path), nothing spent on it
        normalizer_epsilon = None
    elif normalizer_epsilon is None and not pubs and pretrained is None and sens.info.schema is not None:
        # nothing public (a public fact): by default a share of epsilon buys a DP normaliser (privsynth.synth.scratch)
        from privsynth.synth.scratch import default_normalizer_epsilon

        normalizer_epsilon = default_normalizer_epsilon(epsilon)
    dp_norm = normalizer_epsilon is not None
    derived = None  # simulator data without a schema or public data: the environment's bounds act as its schema
    if not dp_norm and not pubs and pretrained is None and sens.info.schema is None:
        from privsynth.release.support import environment_schema

        derived = environment_schema(sens.info, sens.obs_dim, sens.act_dim, obs_bounds=obs_bounds,
                                     reward_bounds=reward_bounds)  # public facts only, before any row is read
        if derived is not None:
            sens = dataclasses.replace(sens, info=dataclasses.replace(sens.info, schema=derived))
    if dp_norm:
        if pubs or pretrained is not None:
            raise InvalidData("a DP normaliser is for runs without public data: drop it, or drop the public data")
        if not 0 < normalizer_epsilon < epsilon:
            raise PrivacyError(f"the normaliser's epsilon must lie in (0, {epsilon:g}), got {normalizer_epsilon:g}")
        from privsynth.release.support import normaliser_bounds

        if sens.info.schema is not None:  # the schema's bounds, in the model's (one-hot) encoding
            from privsynth.data.schema import RowCodec

            bounds = RowCodec(sens.info.schema).bounds()
        else:
            bounds = normaliser_bounds(sens.info, sens.obs_dim, sens.act_dim, obs_bounds=obs_bounds,
                                       reward_bounds=reward_bounds)  # before any sensitive row is read
    scratch = not dp_norm and not pubs and pretrained is None and sens.info.schema is not None  # schema bounds
    if not dp_norm and not scratch and not pubs and pretrained is None and not resumable:
        raise InvalidData("no public data: pass public datasets, a pre-trained synthesizer, a DP normaliser "
                          "budget (normalizer_epsilon / --dp-normalizer), or import the data with a schema "
                          "(--schema) or its environment (--env-id)")
    if config is not None and not config.private and out_dataset is not None:
        raise PrivacyError("refusing to release the output of the no-privacy ablation as a dataset")
    from privsynth.synth.warmstart import resolve_warm_share

    if warm_start and (pubs or pretrained is not None):
        raise InvalidData("the warm start is for runs without public data or a pre-trained model: drop one")
    warm_share = resolve_warm_share(warm_start, unit=unit,
                                    default_applies=(scratch or dp_norm) and not pubs and pretrained is None)
    warm_epsilon = warm_share * epsilon
    if epsilon - (normalizer_epsilon or 0.0) - warm_epsilon - policy_epsilon <= 0:
        raise PrivacyError(f"the normaliser, the warm start and the policy share spend all of epsilon {epsilon:g}: "
                           "lower one")

    if done_fine is not None and done_fine.exists():
        print(f"resuming from {done_fine}: DP fine-tuning already done, sampling")
        synth = load_synthesizer(done_fine)
        check_model_fits(synth, sens)
    else:
        t0 = time.perf_counter()
        if isinstance(pretrained, TransitionSynthesizer):
            synth = pretrained
            check_pretrained_public(synth, sens)  # its public data is not the sensitive set (by name)
        elif pretrained is not None:
            synth = load_synthesizer(resolve_pretrained(pretrained))
            check_model_fits(synth, sens)
            check_pretrained_public(synth, sens, pretrained_card(pretrained))  # by name and by the card's content
            if config is not None:  # keep what the checkpoint was trained as (architecture, pre-training, row
                # representation), take the rest of the caller's config
                config = on_checkpoint(config, synth.config)
                synth.config = config
        elif done_pre is not None and done_pre.exists():
            print(f"resuming from {done_pre}: pre-training already done, DP fine-tuning")
            synth = load_synthesizer(done_pre)
            check_model_fits(synth, sens)
        elif scratch:  # nothing pre-trained (a public fact): the schema's bounds and a from-scratch schedule
            from privsynth.synth.scratch import schema_synthesizer

            synth = schema_synthesizer(sens.info, sens.obs_dim, sens.act_dim, config,
                                       source=f"{sens.info.env_id} spaces and reward bounds" if derived else None)
        elif dp_norm:
            from privsynth.data.dataset import DatasetInfo
            from privsynth.release.support import environment_facts
            from privsynth.synth.scratch import schema_synthesizer

            if sens.info.schema is not None:
                synth = schema_synthesizer(sens.info, sens.obs_dim, sens.act_dim, config)
            else:
                synth = TransitionSynthesizer(config or demo_config())
                # the template is public: the environment's facts only, nothing else of the sensitive dataset's info
                synth._build(sens.obs_dim, sens.act_dim,
                             DatasetInfo(name=sens.info.name, **environment_facts(sens.info)))
            synth.fit_dp_normalizer(sens, low=bounds[0], high=bounds[1], epsilon=float(normalizer_epsilon),
                                    delta=delta, unit=unit, accountant=synth.config.dp.accountant)
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
        if warm_epsilon and (scratch or dp_norm):  # a DP summary -> a corpus (free) -> pre-training on it (free)
            _warm_start(synth, sens, obs_bounds, reward_bounds, epsilon=warm_epsilon, delta=delta, unit=unit,
                        progress=progress)
        seconds["pretrain"] = time.perf_counter() - t0
        if postprocess:  # filters that keep no public row would refuse the release after the budget is spent
            from privsynth.release.salvage import check_filters_can_keep

            # the model's samples only where it learnt something public (pre-trained on public data, or given one
            # with weights): an untrained network samples noise, which the maze's walls may all reject by chance, and
            # a given model with public statistics only (the no-pre-training ablation) has nothing to sample
            learnt = (pretrained is not None and synth.has_trained_weights()) or (pretrain and bool(pubs))
            check_filters_can_keep(sens.info, postprocess, pubs, synth if not dp_norm and learnt else None)
        t0 = time.perf_counter()
        record_dp_request(synth.config, epsilon, delta, unit)
        if getattr(synth.config, "finetune_curiosity", None) == "auto":  # read at the release's budget, not the share
            from privsynth.synth.curiosity import finetune_curiosity_for

            synth.config.finetune_curiosity = finetune_curiosity_for("auto", sens.info, epsilon)
        if getattr(getattr(synth.config, "dp", None), "fit_columns", None) == "auto":  # the columns the repair keeps
            from privsynth.release.postprocess import fit_columns_for

            synth.config.dp.fit_columns = fit_columns_for("auto", sens.info, steps=postprocess, epsilon=epsilon,
                                                          unit=unit)
        # with a DP normaliser, DP-SGD gets what is left; the guard checks the composed total against epsilon
        synth.finetune(sens, epsilon - (normalizer_epsilon or 0.0) - (warm_epsilon if synth.warm_events else 0.0)
                       - policy_epsilon, delta, unit, progress=progress)
        seconds["finetune"] = time.perf_counter() - t0
        if done_fine is not None:
            _save_stage(synth, done_fine, epsilon, delta)
    if n == 0:  # the fine-tuned model alone (out_dataset is None): its ledger within the budget, nothing sampled
        return _unsampled(synth, epsilon, delta, seconds, t_all, check=synth.config.private)
    t0 = time.perf_counter()
    name = out_dataset or f"{sens.info.name}-synthetic-eps{epsilon:g}"
    try:
        ds = prepare_release(synth.sample(n, progress=progress, name=name), sens.info)
        relabel = _relabeller(synth, sens, ds, epsilon=policy_epsilon, delta=delta, budget=epsilon,
                              progress=progress)
        ds = _maybe_postprocess(
            relabel(ds), postprocess, n=n, topup=topup,
            draw=lambda k, i: relabel(prepare_release(synth.sample(k, seed=_draw_seed(synth, i), name=name),
                                                      sens.info)))
    except Exception as exc:  # after the fine-tune: keep the model (guarded), so the spent budget is not lost
        if synth.ledger is None or not synth.config.private:
            raise
        from privsynth.release.salvage import keep_finetuned

        raise keep_finetuned(exc, synth, done_fine if done_fine is not None and done_fine.exists() else None,
                             epsilon=epsilon, delta=delta, n=n, name=name, steps=postprocess) from exc
    seconds["sample"] = time.perf_counter() - t0
    ds = _laid_out(ds, layout, unit, seconds)
    ds, warnings = _schema_check(ds)
    ledger = synth.ledger
    spent = None
    if synth.config.private:
        spent = release_dataset(ds, ledger, out_dataset, epsilon_budget=epsilon, delta=delta, overwrite=overwrite)
    elif out_dataset is not None:
        raise PrivacyError("refusing to release the output of the no-privacy ablation as a dataset")
    seconds["total"] = time.perf_counter() - t_all
    return SynthesisResult(dataset=ds, ledger=ledger, synthesizer=synth, dataset_id=out_dataset, epsilon=spent,
                           seconds=seconds, warnings=warnings)


def _synthesize_registered(
    name: str,
    sensitive: OfflineDataset | str,
    public_list: list[OfflineDataset | str],
    *,
    epsilon: float,
    delta: float,
    unit: str,
    n: int,
    preset: str | None,
    config: Any,
    out_dataset: str | None,
    overwrite: bool,
    progress: bool,
    t_all: float,
    unsupported: dict[str, bool],
    postprocess: bool | str | Sequence[str] = "auto",
    topup: bool = True,
    episodes: int | None = None,
    layout: str = "transitions",
    obs_bounds: tuple[float, float] | None = None,
    reward_bounds: tuple[float, float] | None = None,
) -> SynthesisResult:
    """make -> fit -> sample -> guarded release for a registered synthesizer without the staged capability; without
    public data, one with the ``public_bounds`` capability takes its grid from the environment's bounds."""
    from privsynth.synth import registry

    given = [k for k, v in unsupported.items() if v]
    if given:
        have = [n for n, e in ((n, registry.entry(n)) for n in registry.names()) if "staged" in e.capabilities]
        raise InvalidData(f"{', '.join(given)} is available for {', '.join(have) or 'no registered synthesizer'} "
                          f"only, not for {name}")
    bounded = not public_list and "public_bounds" in registry.entry(name).capabilities
    if not public_list and not bounded:
        raise InvalidData(f"{name} needs public data (pre-training, bins, normaliser): pass public datasets")
    synth = registry.make(name, preset=preset or "cpu", config=config)  # bad presets/settings: before the data
    sens = as_dataset(sensitive).mark_sensitive(True)
    if bounded:  # the grid from public facts only (the schema, or the environment's spaces and the given bounds)
        from privsynth.synth.warmstart import public_grid

        found = public_grid(sens.info, sens.obs_dim, sens.act_dim, obs_bounds=obs_bounds, reward_bounds=reward_bounds)
        if found is None:
            raise InvalidData(f"{name} without public data needs a schema or an environment: pass public datasets")
        synth.grid_from_bounds(found[0], sens.obs_dim, sens.act_dim, found[1])
    Budget(epsilon, delta, unit).check_dataset(sens)
    from privsynth.data.minari_io import check_env_spaces

    check_env_spaces(sens.info, sens.obs_dim, sens.act_dim)
    postprocess = _check_postprocess(sens.info, postprocess, unit=unit, episodes=episodes, epsilon=epsilon)
    pubs = [as_dataset(p) for p in public_list]
    for pub in pubs:  # pre-training reads public data unaccounted: it must hold no sensitive record
        check_public(pub, sens)
    record_dp_request(synth.config, epsilon, delta, unit)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if pubs:  # registry.fit's first step, timed on its own
        registry.pretrain(synth, pubs, progress=progress)
    t1 = time.perf_counter()
    registry.fit(synth, sens, public=None, epsilon=epsilon, delta=delta, unit=unit, progress=progress)
    t2 = time.perf_counter()
    seconds.update(pretrain=t1 - t0, finetune=t2 - t1, fit=t2 - t0)
    if n == 0:  # the fitted model alone (out_dataset is None): its ledger within the budget, nothing sampled
        return _unsampled(synth, epsilon, delta, seconds, t_all)
    t0 = time.perf_counter()
    ds_name = out_dataset or f"{sens.info.name}-synthetic-{name}-eps{epsilon:g}"
    size = {"n_episodes": episodes} if episodes is not None else {"n_transitions": n}
    ds = _maybe_postprocess(
        prepare_release(registry.sample(synth, **size, name=ds_name, progress=progress), sens.info),
        postprocess, n=n, topup=topup,
        draw=lambda k, i: prepare_release(registry.sample(synth, n_transitions=k, seed=_draw_seed(synth, i),
                                                          name=ds_name), sens.info))
    seconds["sample"] = time.perf_counter() - t0
    if episodes is None:
        ds = _laid_out(ds, layout, unit, seconds)
    ds, warnings = _schema_check(ds)
    spent = release_dataset(ds, synth.ledger, out_dataset, epsilon_budget=epsilon, delta=delta, overwrite=overwrite)
    seconds["total"] = time.perf_counter() - t_all
    return SynthesisResult(dataset=ds, ledger=synth.ledger, synthesizer=synth, dataset_id=out_dataset, epsilon=spent,
                           seconds=seconds, warnings=warnings)


def _relabeller(synth: Any, sens: OfflineDataset, rows: OfflineDataset, *, epsilon: float, delta: float,
                budget: float, progress: bool) -> Callable[[OfflineDataset], OfflineDataset]:
    """The action relabel of the sampled batches (:mod:`privsynth.release.relabel`) when ``epsilon`` is set and the
    fine-tune was private, else the identity (the no-privacy ablation releases nothing: its actions stay the
    model's)."""
    if not epsilon or not synth.config.private:
        return lambda ds: ds
    from privsynth.release.relabel import fit_relabeller

    return fit_relabeller(synth, sens, rows, epsilon=epsilon, delta=delta, budget=budget, progress=progress)


def _warm_start(synth: TransitionSynthesizer, sens: OfflineDataset, obs_bounds: Any, reward_bounds: Any, *,
                epsilon: float, delta: float, unit: str, progress: bool) -> None:
    """The warm start (:mod:`privsynth.synth.warmstart`): a PrivSyn summary of ``sens`` at ``epsilon`` on the public
    grid of its schema or environment (:func:`~privsynth.synth.warmstart.public_grid`, as PrivSyn without public data
    uses), a corpus drawn from it, pre-training on the corpus only; the events wait for the ledger."""
    from privsynth.synth.warmstart import public_grid, warm_corpus

    found = public_grid(sens.info, sens.obs_dim, sens.act_dim, obs_bounds=obs_bounds, reward_bounds=reward_bounds)
    if found is None:
        raise InvalidData("the warm start needs a schema or an environment for its public grid")
    corpus, events = warm_corpus(sens, found[0], epsilon=epsilon, delta=delta, unit=unit,
                                 noise_seed=synth.config.noise_seed, seed=synth.config.seed)
    synth.warm_start(corpus, events, progress=progress)


def _laid_out(ds: OfflineDataset, layout: str, unit: str, seconds: dict[str, float]) -> OfflineDataset:
    """A transition-level release in ``layout`` (:func:`privsynth.release.layout.apply_layout`; free under DP;
    its time in ``seconds["layout"]``); a trajectory-level release, or rows that are episodes already, as they are."""
    if unit != "transition" or ds.n_episodes != ds.n_transitions:
        return ds
    from privsynth.release.layout import apply_layout

    t0 = time.perf_counter()
    ds = apply_layout(ds, layout)
    seconds["layout"] = time.perf_counter() - t0
    return ds


def _schema_check(ds: OfflineDataset) -> tuple[OfflineDataset, list[str]]:
    """``ds`` with the released values that break its schema (e.g. ``3% of heart_rate outside [20, 250]``) recorded
    in its metadata as ``extra["schema_check"]`` (not on the ledger), and those lines. A check on DP outputs and the
    public schema only: free post-processing. Without a schema: nothing to check, ``ds`` as it is."""
    if not ds.info.schema:
        return ds, []
    from privsynth.data.validity import schema_warnings

    warnings = schema_warnings(ds)
    info = dataclasses.replace(ds.info, extra={**ds.info.extra, "schema_check": {"valid": not warnings,
                                                                                  "warnings": warnings}})
    return dataclasses.replace(ds, info=info), warnings


def _unsampled(synth: Any, epsilon: float, delta: float, seconds: dict[str, float], t_all: float, *,
               check: bool = True) -> SynthesisResult:
    """The result of an ``n=0`` request: no rows; the ledger's composed ε checked against the budget (the release
    guard's check, :func:`privsynth.privacy.guard.check_budget`) so the model may then be saved through the guard."""
    from privsynth.privacy.guard import check_budget

    spent = check_budget(synth.ledger, epsilon, delta) if check else None
    seconds["total"] = time.perf_counter() - t_all
    return SynthesisResult(dataset=None, ledger=synth.ledger, synthesizer=synth, epsilon=spent,  # type: ignore[arg-type]
                           seconds=seconds)


def _save_stage(synth: Any, path: Path, epsilon: float, delta: float) -> None:
    """Write the fine-tuned stage checkpoint of a ``workdir``. A DP fine-tuned model is a release too (docs/DESIGN.md
    invariant 3), so it goes through the guard: a ledger over ``epsilon`` (a ``pretrained`` synthesizer that had
    already spent part of it) or not DP (reproducible noise) is refused before anything is written. The no-privacy
    ablation keeps its plain stage file (its data is refused at release anyway)."""
    if not synth.config.private:
        synth.save(path)
        return
    from privsynth.privacy.guard import guarded_save_model

    guarded_save_model(synth, path, epsilon, delta)


def _draw_seed(synth: Any, i: int) -> int:
    """The sampling seed of a top-up's ``i``-th extra draw from ``synth`` (its own seed moved away)."""
    from privsynth.release.postprocess import draw_seed

    return draw_seed(getattr(synth.config, "seed", 0), i)


def _check_postprocess(info: Any, apply: Any, *, unit: str, episodes: int | None, auto: Any = "resolve",
                       epsilon: float | None = None) -> Any:
    """The post-processing a release gets: ``"auto"`` resolved from the environment and the budget ``epsilon``
    (public facts only; row releases at the transition unit only: episodes keep their shape; ``auto``: the caller's
    :func:`~privsynth.release.postprocess.default_steps` of ``info`` when it has it), anything else checked. An
    unsupported request fails here, before any training spends the budget."""
    from privsynth.release.postprocess import check_supported, default_steps

    if apply == "auto":
        if unit != "transition" or episodes is not None:
            return None
        return default_steps(info, epsilon=epsilon) if auto == "resolve" else auto
    if apply:
        check_supported(info, apply)
    return apply


def _maybe_postprocess(
    ds: OfflineDataset, apply: Any, *, n: int, topup: bool, draw: Callable[[int, int], OfflineDataset]
) -> OfflineDataset:
    """``ds`` repaired by :func:`privsynth.release.postprocess.postprocess` when ``apply`` (free under DP): ``True``
    or ``"all"`` for every step, else the steps named (:func:`~privsynth.release.postprocess.step_options`). With
    ``topup``, rows a step dropped are made up for by ``draw(k, i)`` (more rows of the same released model)."""
    if not apply:
        return ds
    from privsynth.release.postprocess import postprocess, step_options, topped_up

    if topup:
        return topped_up(ds, draw, n, **step_options(apply))[0]
    return postprocess(ds, **step_options(apply))[0]

