"""Built-in cell kinds of the benchmark runner; each is one small function ``fn(params, ctx) -> dict``.

The kinds glue library functions, nothing more:

* ``pretrain``: :class:`privsynth.synth.TransitionSynthesizer` pre-trained on the public datasets (checkpoint).
* ``synthesize``: DP fine-tune of the upstream pre-trained checkpoint on the sensitive dataset (or plain fine-tune for
  ``epsilon: null``; ``finetune: none`` with ``epsilon: 0.0``: none at all, the public model alone), then sampling;
  writes ``synthetic.npz``, ``model.pt`` and the ledger. Any other registered synthesizer (``privorl-n`` without a
  pretrain upstream, ``privorl-j``, the baselines, ...) runs through :func:`_synthesize_registered` and writes
  ``model.ckpt`` instead.
* ``agent``: :func:`privsynth.evaluation.agents.train_agent` on the synthetic (or, for ``synthesizer: real``, the real)
  data (``postprocess: true``: post-processed first, :mod:`privsynth.release.postprocess`), evaluated in the real
  environment; final (last-K mean) and best scores. Compatible agent cells of a stage
  (same agent, budget and evaluation) run as one batched model (:func:`agent_cells`, ``train_batched``).
* ``fidelity``: marginal (1 − KS) and correlation scores against the real sensitive data.
* ``mia``: :func:`privsynth.evaluation.mia.run_audit` on the upstream fine-tuned checkpoint, members = its
  fine-tuning data, non-members = a held-out split; the public pre-trained checkpoint is the reference model.

Imports are local so that a missing optional part fails only the cells that need it. Synthesizer settings come as
``config: {preset: cpu|demo|paper|tiny, <section>: {<field>: value}}`` overrides of the dataclass config (sections
under a synthesizer's name apply to that synthesizer only; an unknown setting is refused, :func:`_split_config`).
The privacy guards of the pretrain and synthesize kinds (public data vs the sensitive set, the public-only row, the
staged cell's ε budget) live in :mod:`.cell_guards`.

Why this module is long: it holds every built-in kind (one import registers them all, :mod:`.bench.kinds`) and the
helpers they share (config overrides, upstream model and data lookup); each kind is one short function.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import resource
import time
from pathlib import Path
from typing import Any

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.context import CellContext
from privsynth.evaluation.cell_guards import check_pretrained_on_public, check_public_only_model
from privsynth.evaluation.cell_guards import public_datasets as _public  # privacy guards of these cells
from privsynth.evaluation.bench.records import holder_only, result_value
from privsynth.evaluation.bench.registry import register_cell, register_group
from privsynth.evaluation.bench.sources import load_dataset_file, save_dataset


# ----------------------------------------------------------------------------------------------------- helpers
def _registered() -> tuple[str, ...]:
    from privsynth.synth.registry import names

    return tuple(names())


# names a suite may use for ``synthesizer``: every registered name, and ``privorl_n`` for the PrivORL-n pipeline with a
# shared pre-training stage (plus "real" in downstream cells)
SYNTHESIZERS = ("privorl_n", *_registered())


def _check_synthesizer(params: dict[str, Any]) -> None:
    name = params.get("synthesizer", "privorl_n")
    if name not in SYNTHESIZERS:
        raise InvalidData(f"unknown synthesizer '{name}': the runner knows {', '.join(SYNTHESIZERS)}")


def _apply(obj: Any, overrides: dict[str, Any], where: str = "config") -> None:
    for key, value in overrides.items():
        if not hasattr(obj, key):
            raise InvalidData(f"unknown synthesizer setting '{where}.{key}'")
        current = getattr(obj, key)
        if isinstance(value, dict) and dataclasses.is_dataclass(current):
            _apply(current, value, f"{where}.{key}")
        else:
            setattr(obj, key, tuple(value) if isinstance(current, tuple) and isinstance(value, list) else value)


def _split_config(spec: dict[str, Any] | None, name: str) -> tuple[str, dict[str, Any]]:
    """``(preset, overrides)`` of synthesizer ``name`` from a cell's ``config``.

    ``config: {preset: tiny, finetune: {epochs: 5}}``: sections and fields at the top apply to the cell's synthesizer;
    sections under a synthesizer's name (``config: {privorl-j: {dp: {...}}}``) apply only to that synthesizer (one
    grid may mix synthesizers whose configs share no fields) and win over the top-level ones. Unknown settings are
    refused by :func:`privsynth.config_io.override` (or the baseline's own check), naming the key."""
    from privsynth.evaluation.bench.suite import deep_merge

    spec = dict(spec or {})
    preset = spec.pop("preset", "cpu")
    own = {"privorl-n", "privorl_n"} if name in ("privorl-n", "privorl_n") else {name}
    nested: dict[str, Any] = {}
    for key in [k for k in spec if k in SYNTHESIZERS]:
        value = spec.pop(key)
        if not isinstance(value, dict):
            raise InvalidData(f"config.{key} must be a mapping of {key} settings, not {type(value).__name__}")
        if key in own:
            nested = deep_merge(nested, value)
    return str(preset), deep_merge(spec, nested)


# What pre-training reads of a PrivORL-n configuration: the network, EDM, curiosity, the pre-training schedule, the
# next-state layout and the sampler (its curiosity pool's draws; the public model alone samples with it too). The DP
# fine-tune's settings are not among them, so a changed fine-tune default leaves a pre-trained checkpoint, and the
# public model alone sampled from it, as they were.
PRETRAIN_SECTIONS = ("edm", "denoiser", "curiosity", "pretrain", "pretrain_curiosity", "next_state", "sampler")
SCOPED = "pretrain:"  # prefix of a fingerprint over PRETRAIN_SECTIONS only


def _digest(resolved: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _pretrain_digest(resolved: dict[str, Any]) -> str:
    """The :data:`SCOPED` fingerprint of a resolved configuration (``dataclasses.asdict``)."""
    return SCOPED + _digest({k: resolved[k] for k in PRETRAIN_SECTIONS})


def config_fingerprint(kind: str, params: dict[str, Any]) -> str | None:
    """A short hash of the configuration a PrivORL-n ``pretrain`` or ``synthesize`` cell resolves to, its preset
    expanded (seed left out). A cell is keyed by its suite parameters, so without this a cell made before a preset
    changed would still count as finished; the runner stores the fingerprint and re-runs a cell whose fingerprint no
    longer matches. A pre-training cell, and the public model alone (``finetune: none``), hash only what pre-training
    reads (:data:`PRETRAIN_SECTIONS`, prefixed :data:`SCOPED`). None for other kinds and synthesizers (their records
    are taken as they are)."""
    if kind not in ("pretrain", "synthesize") or params.get("synthesizer", "privorl_n") not in ("privorl_n",
                                                                                               "privorl-n"):
        return None
    resolved = dataclasses.asdict(synth_config(params.get("config"), 0))
    resolved.pop("seed", None)
    if kind == "pretrain" or params.get("finetune") == "none":
        return _pretrain_digest(resolved)
    return _digest(resolved)


def checkpoint_fingerprint(path: Path) -> str | None:
    """The :data:`SCOPED` fingerprint of the configuration a saved PrivORL-n checkpoint holds (read as data, never
    unpickled); None when there is no readable checkpoint. It vouches for a pre-training cell recorded under an
    older, unscoped fingerprint: the checkpoint says what it was trained with."""
    from privsynth.synth.checkpoint import read_checkpoint
    from privsynth.synth.config import config_from_dict
    from privsynth.synth.transition import FORMAT

    try:
        saved = read_checkpoint(path, FORMAT, "transition-synthesizer")["config"]
        resolved = dataclasses.asdict(config_from_dict(saved))
    except (InvalidData, KeyError, TypeError):
        return None
    return _pretrain_digest(resolved)


def _check_fixed_sections(config: Any, asked: dict[str, Any], cell_id: str) -> None:
    """A synthesize cell after a pretrain cell cannot change what the checkpoint fixed (network, EDM, pre-training,
    next-state layout): a setting there that differs from the checkpoint's is refused, never silently ignored (the
    same setting as the checkpoint's, e.g. from the suite's defaults, is fine)."""
    from privsynth.config_io import override

    if not asked:
        return
    wanted = copy.deepcopy(config)
    override(wanted, asked)
    for key in asked:
        if getattr(wanted, key) != getattr(config, key):
            raise InvalidData(f"cell {cell_id}: config.{key} is fixed by the pretrain cell's checkpoint "
                              f"({getattr(config, key)!r}); a synthesize cell cannot change it (asked "
                              f"{asked[key]!r}): set it on the pretrain stage")


def synth_config(spec: dict[str, Any] | None, seed: int = 0):
    """A :class:`TransitionSynthConfig` from ``{preset: ..., section: {field: value}}``; every preset the registry
    knows for ``privorl-n`` (``cpu``, ``demo``, ``paper``, ``tiny``)."""
    from privsynth.config_io import override
    from privsynth.synth import registry

    preset, overrides = _split_config(spec, "privorl-n")
    cfg = registry.make("privorl-n", preset=preset).config
    override(cfg, overrides)
    cfg.seed = seed
    return cfg


# figures a cell measures about its own process outside any DP mechanism: with the sensitive set read (a fine-tune's
# or fit's time), or in a worker that may have run such cells (peak memory); records keep them under holder_only
_SENSITIVE_TIMES = ("finetune_seconds", "fit_seconds")
_WORKER = ("peak_rss_mb",)


def _save_checkpoint(synth: Any, path: Any, params: dict[str, Any], *, private: bool) -> None:
    """Write a cell's model: through the release guard (``privsynth finetune``'s writer, its ledger within the cell's
    ε) when it learnt from the sensitive set with DP; as it is otherwise (public only, or the no-DP ablation, whose
    artifacts the bench keeps for its controls and never releases)."""
    if not private:
        synth.save(path)
        return
    from privsynth.privacy.guard import guarded_save_model

    guarded_save_model(synth, path, float(params["epsilon"]), float(params.get("delta", 1e-5)))


def _peak_rss_mb() -> float:
    """Peak resident memory of this worker process so far (an upper bound for the cell when workers are reused)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _source_data(params: dict[str, Any], ctx: CellContext):
    """Training data of a downstream cell: the real sensitive data for ``synthesizer: real``, else the synthetic
    dataset written by the upstream ``synthesize`` cell."""
    if params.get("synthesizer") == "real":
        return ctx.dataset(params["data"]["sensitive"])
    if ctx.upstream is None:
        raise InvalidData(f"cell {ctx.cell_id} needs an upstream synthesize cell")
    path = ctx.upstream_dir / "synthetic.npz"
    if not path.exists():  # committed results folders keep the records, not the artifacts
        raise InvalidData(f"cell {ctx.cell_id}: upstream cell {ctx.upstream.id} left no synthetic.npz in "
                          f"{ctx.upstream_dir} (its artifacts are not committed or were deleted): delete "
                          f"cells/{ctx.upstream.id}.json to re-run it; the cells downstream of it then run again")
    return load_dataset_file(path)


def _agent_data(params: dict[str, Any], ctx: CellContext) -> tuple[Any, dict[str, Any]]:
    """Training data of an agent cell and extra result fields. ``postprocess: true`` applies
    :func:`privsynth.release.postprocess.postprocess` (the public environment only, a deterministic function of the DP
    sample: free under DP) to the upstream synthetic data and records its stats under ``postprocess``;
    ``postprocess: [clip, reward]`` applies only the steps named. ``calibrate_actions: true`` then maps the actions
    onto the cell's public datasets' action marginal (:func:`privsynth.release.calibrate.calibrate_actions`, also free
    under DP) and records its stats under ``calibrate_actions``."""
    data = _source_data(params, ctx)
    extra: dict[str, Any] = {}
    if not params.get("postprocess") and not params.get("calibrate_actions"):
        return data, extra
    if params.get("synthesizer") == "real":
        raise InvalidData(f"cell {ctx.cell_id}: postprocess and calibrate_actions apply to synthetic data, not to "
                          "synthesizer: real")
    if params.get("postprocess"):
        from privsynth.release.postprocess import postprocess, step_options

        # only the sensitive set's environment facts (its info), none of its records
        data, extra["postprocess"] = postprocess(data, environment=ctx.dataset_info(params["data"]["sensitive"]),
                                                 **step_options(params["postprocess"]))
    if params.get("calibrate_actions"):
        from privsynth.release.calibrate import calibrate_actions

        data, extra["calibrate_actions"] = calibrate_actions(data, _public(params, ctx))
    return data, extra


# ----------------------------------------------------------------------------------------------------- kinds
@register_cell("pretrain")
def pretrain_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Pre-train on the public datasets and save the checkpoint (PrivORL §V-B)."""
    from privsynth.synth import TransitionSynthesizer

    _check_synthesizer(params)
    cfg = synth_config(params.get("config"), int(params.get("seed", 0)))
    synth = TransitionSynthesizer(cfg)
    t0 = time.perf_counter()
    synth.pretrain(_public(params, ctx), progress=False)
    seconds = time.perf_counter() - t0
    synth.save(ctx.artifact_dir / "model.pt")
    return holder_only({"pretrain_seconds": seconds, "n_parameters": synth.n_parameters(),
                        "peak_rss_mb": _peak_rss_mb()}, *_WORKER)


def _public_only(params: dict[str, Any], ctx: CellContext) -> bool:
    """``finetune: none``: the public model alone, no sensitive record read; it spends nothing, so epsilon must be 0."""
    if params.get("finetune") != "none":
        return False
    if params.get("epsilon") is None or float(params["epsilon"]) != 0.0:
        raise InvalidData(f"cell {ctx.cell_id}: finetune: none spends no privacy budget; set epsilon: 0.0")
    return True


@register_cell("synthesize")
def synthesize_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Fine-tune (DP unless ``epsilon`` is null) on the sensitive data, sample, save data, model and ledger. With
    ``finetune: none`` and ``epsilon: 0.0`` the pre-trained upstream model is sampled as it is (the public-only
    reference: what a release costs nothing for). ``postprocess: [goals, walls]`` (any steps of
    :func:`privsynth.release.postprocess.step_options`) post-processes the sample in the sensitive dataset's public
    environment and tops it up to ``num_samples`` rows with more draws of the same model (free under DP)."""
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.config import CHECKPOINT_FIXED, on_checkpoint

    _check_synthesizer(params)
    name = params.get("synthesizer", "privorl_n")
    staged = name == "privorl_n" or (name == "privorl-n" and (ctx.upstream is not None or params.get("pretrain") == "none"))
    if not staged:
        return _synthesize_registered(name, params, ctx)
    seed = int(params.get("seed", 0))
    epsilon = params.get("epsilon")
    public_only = _public_only(params, ctx)
    if public_only and ctx.upstream is None:
        raise InvalidData(f"cell {ctx.cell_id}: finetune: none samples a pre-trained model; give it a pretrain upstream")
    if ctx.upstream is not None:
        synth = TransitionSynthesizer.load(ctx.upstream_dir / "model.pt")
        overrides = _split_config(params.get("config"), name)[1]
        _check_fixed_sections(synth.config, {k: v for k, v in overrides.items() if k in CHECKPOINT_FIXED},
                              ctx.cell_id)
        # the rest is the cell's own configuration (its preset as it resolves now, and its settings), as the release
        # route takes its caller's (privsynth.release.pipeline, the CLI)
        synth.config = on_checkpoint(synth_config(params.get("config"), seed), synth.config)
        check_pretrained_on_public(synth, params["data"]["sensitive"], ctx)  # its pre-training data vs this cell's
        if public_only:  # the ε = 0 row: a public pre-trained model, never fine-tuned (no ledger)
            check_public_only_model(synth, ctx)
    elif params.get("pretrain", "none") == "none":
        # no-pre-training ablation: fresh weights; the normaliser still comes from public data (never sensitive)
        synth = TransitionSynthesizer(synth_config(params.get("config"), seed)).fit_public_stats(_public(params, ctx))
    else:
        raise InvalidData(f"cell {ctx.cell_id} expected a pre-trained checkpoint but its pretrain cell is missing")
    if epsilon is not None and not public_only:  # a DP row: through the one release route
        return _staged_release(synth, params, ctx)
    # the two controls below are never released: `epsilon: null` (the no-DP ablation, its artifacts kept for the
    # bench's controls only) and `finetune: none` with epsilon 0 (the public model alone, no sensitive record read)
    t0 = time.perf_counter()
    if public_only:
        # the public model alone (epsilon = 0): only the sensitive dataset's info is read (its environment's public
        # facts, ENV_FACT_FIELDS), so that the sample is labelled with the environment it is evaluated in
        synth.adopt_environment(ctx.dataset_info(params["data"]["sensitive"]))
    else:
        sensitive = ctx.dataset(params["data"]["sensitive"])
        synth.config.private = False  # the no-DP ablation (epsilon: null): a control, never released
        synth.finetune(sensitive, 1.0, float(params.get("delta", 1e-5)), params.get("unit", "transition"),
                       progress=False)  # epsilon 1.0: ignored when private is False
    finetune_seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"finetune_seconds": finetune_seconds, "n_parameters": synth.n_parameters()}
    if public_only:
        out["public_only"] = True
    n = int(params.get("num_samples", 0))
    if n > 0:
        t0 = time.perf_counter()
        synthetic = synth.sample(n, seed=seed, progress=False)
        if params.get("postprocess"):  # free under DP; rows dropped are made up for by more draws of the same model
            from privsynth.release.postprocess import draw_seed, step_options, topped_up

            synthetic, out["postprocess"] = topped_up(
                synthetic, lambda k, i: synth.sample(k, seed=draw_seed(seed, i), progress=False), n,
                environment=ctx.dataset_info(params["data"]["sensitive"]), **step_options(params["postprocess"]))
        out["sample_seconds"] = time.perf_counter() - t0
        out["n_synthetic"] = len(synthetic)
        save_dataset(synthetic, ctx.artifact_dir / "synthetic.npz")
    _save_checkpoint(synth, ctx.artifact_dir / "model.pt", params, private=synth.config.private and not public_only)
    hist = synth.history[-1] if synth.history else {}
    for key in ("epsilon", "noise_multiplier", "steps", "sample_rate", "final_loss"):
        if key in hist:
            out[f"dp_{key}" if key != "final_loss" else key] = hist[key]
    if synth.config.private and synth.ledger is not None:
        (ctx.artifact_dir / "ledger.json").write_text(synth.ledger.to_json())
    out["peak_rss_mb"] = _peak_rss_mb()
    return holder_only(out, *_WORKER) if public_only else holder_only(out, *_SENSITIVE_TIMES, *_WORKER)


def _release(params: dict[str, Any], ctx: CellContext, **kwargs: Any) -> Any:
    """A DP cell's fine-tune and sample through :func:`privsynth.release.synthesize` (the one route from sensitive
    data to a DP artifact): its checks, DP fine-tune, ``num_samples`` rows (none for 0) and the release guard's budget
    check, writing nothing (the cell saves the rows and the model itself)."""
    from privsynth.privacy.budget import Budget
    from privsynth.release import synthesize

    budget = Budget(float(params["epsilon"]), float(params.get("delta", 1e-5)), kwargs.pop("unit"))
    return synthesize(ctx.dataset(params["data"]["sensitive"]), budget=budget, n=int(params.get("num_samples", 0)),
                      out_dataset=None, progress=False, **kwargs)


def _staged_release(synth: Any, params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """The DP row of a staged PrivORL-n cell: ``synth`` (the upstream pre-trained model, or public statistics only for
    ``pretrain: none``) DP fine-tuned and sampled by :func:`_release`; saves data, ``model.pt`` (guarded) and ledger."""
    res = _release(params, ctx, unit=params.get("unit", "transition"), pretrained=synth,
                   postprocess=params.get("postprocess") or False, policy_share=params.get("policy_share", "auto"))
    out: dict[str, Any] = {"finetune_seconds": res.seconds["finetune"], "n_parameters": synth.n_parameters(),
                           "dp_epsilon": res.epsilon}  # dp_epsilon: the ledger's total, checked within the cell's ε
    if res.dataset is not None:
        if params.get("postprocess"):
            out["postprocess"] = res.dataset.info.extra["postprocess"]
        if "policy_relabel" in res.dataset.info.extra:  # a DP output's record (its ε, σ, steps)
            out["policy_relabel"] = res.dataset.info.extra["policy_relabel"]
        out["sample_seconds"] = res.seconds["sample"]
        out["n_synthetic"] = len(res.dataset)
        save_dataset(res.dataset, ctx.artifact_dir / "synthetic.npz")
    _save_checkpoint(synth, ctx.artifact_dir / "model.pt", params, private=True)
    hist = synth.history[-1] if synth.history else {}
    for key in ("epsilon", "noise_multiplier", "steps", "sample_rate", "final_loss"):
        if key in hist and f"dp_{key}" not in out:
            out[f"dp_{key}" if key != "final_loss" else key] = hist[key]
    (ctx.artifact_dir / "ledger.json").write_text(synth.ledger.to_json())
    out["peak_rss_mb"] = _peak_rss_mb()
    return holder_only(out, *_SENSITIVE_TIMES, *_WORKER)


def _synthesize_registered(name: str, params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Any registered synthesizer through the same steps: make, fit (pre-train on the public data, DP fine-tune at
    ``epsilon``), sample ``num_samples`` transitions, save data, model (``model.ckpt``) and ledger.

    ``config: {preset: tiny, finetune: {epochs: 20}}`` sets the cell's synthesizer (:func:`_split_config`);
    ``config: {preset: tiny, privorl-j: {finetune: {epochs: 20}}}`` only when the cell's synthesizer is privorl-j.
    Result keys: ``fit_seconds`` (pre-train + fine-tune), ``pretrain_seconds``, ``finetune_seconds``, ``unit``, the
    fine-tune's ``dp_steps`` / ``dp_noise_multiplier`` / ``dp_sample_rate`` when the synthesizer records them,
    ``sample_seconds``, ``n_synthetic``, ``dp_epsilon``, ``n_parameters``, ``peak_rss_mb``. ``finetune: none`` with
    ``epsilon: 0.0`` samples the pre-trained public model alone (``public_only``; no sensitive record is read, no
    ledger written), for synthesizers that can take the evaluation environment's public facts. ``epsilon: null`` is
    the no-DP ablation, for synthesizers with a ``private`` switch (PrivORL-j): the same pre-training and fine-tune
    schedule without clipping or noise, saved as it is, no ledger, never released."""
    from privsynth.synth import registry

    entry = registry.entry(name)
    public_only = _public_only(params, ctx)
    no_dp = params.get("epsilon") is None  # the no-DP ablation: a control, never released
    if no_dp and public_only:
        raise InvalidData(f"cell {ctx.cell_id}: the public model alone is epsilon 0.0, not null")
    unit = params.get("unit", entry.units[0])
    registry.check_unit(name, unit)  # before any pre-training
    preset, overrides = _split_config(params.get("config"), name)
    synth = registry.make(name, preset=preset, **overrides)
    if public_only and not callable(getattr(synth, "adopt_environment", None)):
        raise InvalidData(f"cell {ctx.cell_id}: {name} has no public model to sample on its own (finetune: none)")
    if no_dp and not hasattr(synth.config, "private"):
        raise InvalidData(f"cell {ctx.cell_id}: {name} has no no-privacy fine-tune; give an epsilon")
    if hasattr(synth.config, "seed"):
        synth.config.seed = int(params.get("seed", 0))
    public = _public(params, ctx)
    n = int(params.get("num_samples", 0))
    synthetic = None
    if public_only:  # the public model alone (epsilon 0, never released): its own code, no sensitive record read
        t0 = time.perf_counter()
        registry.pretrain(synth, public)
        t1 = time.perf_counter()
        # only the sensitive set's environment facts (public), to label the sample with its environment
        synth.adopt_environment(ctx.dataset_info(params["data"]["sensitive"]))
        t2 = time.perf_counter()
        out: dict[str, Any] = {"fit_seconds": t2 - t0, "pretrain_seconds": t1 - t0, "finetune_seconds": t2 - t1,
                               "unit": unit, "public_only": True}
        if n > 0:
            t0 = time.perf_counter()
            synthetic = registry.sample(synth, n_transitions=n, seed=int(params.get("seed", 0)))
            out["sample_seconds"] = time.perf_counter() - t0
    elif no_dp:  # the no-DP ablation (epsilon: null): pre-train, fine-tune without clipping or noise, sample
        t0 = time.perf_counter()
        registry.pretrain(synth, public)
        t1 = time.perf_counter()
        synth.config.private = False
        synth.finetune(ctx.dataset(params["data"]["sensitive"]), 1.0, float(params.get("delta", 1e-5)), unit,
                       progress=False)  # epsilon 1.0: ignored when private is False
        t2 = time.perf_counter()
        out = {"fit_seconds": t2 - t0, "pretrain_seconds": t1 - t0, "finetune_seconds": t2 - t1, "unit": unit}
        if n > 0:
            synthetic = registry.sample(synth, n_transitions=n, seed=int(params.get("seed", 0)))
            out["sample_seconds"] = time.perf_counter() - t2
    else:  # a DP row: pre-train, DP fine-tune and sample through the one release route
        res = _release(params, ctx, unit=unit, synth=name, config=synth.config, public=public)
        synth, synthetic = res.synthesizer, res.dataset
        sec = res.seconds
        out = {"fit_seconds": sec["pretrain"] + sec["finetune"], "pretrain_seconds": sec["pretrain"],
               "finetune_seconds": sec["finetune"], "unit": unit}
        if synthetic is not None:
            out["sample_seconds"] = sec["sample"]
    tuned = [h for h in getattr(synth, "history", []) or [] if h.get("phase") == "finetune"]
    for key in ("noise_multiplier", "steps", "sample_rate"):
        if tuned and isinstance(tuned[-1].get(key), (int, float)):
            out[f"dp_{key}"] = tuned[-1][key]
    if synthetic is not None:
        out["n_synthetic"] = len(synthetic)
        if not (public_only or no_dp):
            out["dp_epsilon"] = res.epsilon
        save_dataset(synthetic, ctx.artifact_dir / "synthetic.npz")
    if callable(getattr(synth, "n_parameters", None)):
        out["n_parameters"] = synth.n_parameters()
    # registry.load reads it back (format tag inside the file); a DP fit's model through the guard, samples or not
    _save_checkpoint(synth, ctx.artifact_dir / "model.ckpt", params, private=not (public_only or no_dp))
    if not (public_only or no_dp):
        (ctx.artifact_dir / "ledger.json").write_text(synth.ledger.to_json())
    out["peak_rss_mb"] = _peak_rss_mb()
    return holder_only(out, *_WORKER) if public_only else holder_only(out, *_SENSITIVE_TIMES, *_WORKER)


def upstream_model(ctx: CellContext, need_model: bool = True) -> tuple[Any, float | None]:
    """The upstream synthesize cell's saved model file and the seconds it spent learning from the sensitive data:
    ``model.pt`` and ``finetune_seconds`` of a pipeline cell (``privorl_n``, or ``privorl-n`` after a pretrain cell),
    ``model.ckpt`` and ``finetune_seconds`` (older records: ``fit_seconds``) of a registry cell. No model file is
    refused (one line) when ``need_model``, else returned as None."""
    if ctx.upstream is None:
        raise InvalidData(f"cell {ctx.cell_id} needs an upstream synthesize cell")
    found = [ctx.upstream_dir / f for f in ("model.pt", "model.ckpt") if (ctx.upstream_dir / f).exists()]
    if not found and not need_model:
        found = [None]
    if not found:
        raise InvalidData(f"cell {ctx.cell_id}: upstream cell {ctx.upstream.id} left no model.pt or model.ckpt in "
                          f"{ctx.upstream_dir} (is it a synthesize cell? its artifacts may have been deleted: "
                          "delete its record to re-run it)")
    res = ctx.upstream.result or {}
    seconds = result_value(res, "finetune_seconds", result_value(res, "fit_seconds"))
    return found[0], (float(seconds) if isinstance(seconds, (int, float)) else None)


@register_cell("agent")
def agent_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Train a downstream agent on the (synthetic) data and evaluate it in the real environment (PrivORL §VII)."""
    from privsynth.evaluation.agents import train_agent

    data, extra = _agent_data(params, ctx)
    eval_info = ctx.dataset(params["data"]["sensitive"]).info
    run = train_agent(data, eval_info, agent=params["agent"], seed=int(params.get("seed", 0)),
                      num_updates=int(params["num_updates"]), eval_every=params.get("eval_every"),
                      eval_episodes=params.get("eval_episodes"), final_k=int(params.get("final_k", 3)),
                      progress=False, precision=str(params.get("precision", "fp32")))
    return {"final_score": run.final_score, "best_score": run.best_score, "updates_per_s": run.updates_per_s,
            "train_seconds": run.train_time, "eval_seconds": run.eval_time, "curve": run.curve, **extra}


def _agent_group_key(params: dict[str, Any]) -> dict[str, Any]:
    """Agent cells that may train as one batched model: same agent, budget, evaluation schedule and real environment
    (their seeds and training data may differ)."""
    return {"agent": params["agent"], "num_updates": int(params["num_updates"]),
            "eval_every": params.get("eval_every"), "eval_episodes": params.get("eval_episodes"),
            "final_k": int(params.get("final_k", 3)), "eval_data": params["data"]["sensitive"],
            "precision": str(params.get("precision", "fp32"))}


@register_group("agent", _agent_group_key)
def agent_cells(params_list: list[dict[str, Any]], ctxs: list[CellContext]) -> list[dict[str, Any]]:
    """Several agent cells trained at once with :func:`privsynth.evaluation.agents.train_batched`: each cell keeps
    its own seed, training data and evaluation, and gets the result :func:`agent_cell` would give it."""
    from privsynth.evaluation.agents import AgentJob, train_batched

    prepared = [_agent_data(p, c) for p, c in zip(params_list, ctxs)]
    jobs = [AgentJob(data, c.dataset(p["data"]["sensitive"]).info, int(p.get("seed", 0)))
            for (data, _), p, c in zip(prepared, params_list, ctxs)]
    first = params_list[0]
    runs = train_batched(jobs, first["agent"], num_updates=int(first["num_updates"]),
                         eval_every=first.get("eval_every"), eval_episodes=first.get("eval_episodes"),
                         final_k=int(first.get("final_k", 3)), progress=False,
                         precision=str(first.get("precision", "fp32")))
    return [{"final_score": r.final_score, "best_score": r.best_score, "updates_per_s": r.updates_per_s,
             "train_seconds": r.train_time, "eval_seconds": r.eval_time, "curve": r.curve,
             "batched_with": r.batched_with, **extra} for r, (_, extra) in zip(runs, prepared)]


@register_cell("fidelity")
def fidelity_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Marginal and correlation scores of the synthetic data against the real sensitive data (PrivORL Table III)."""
    from privsynth.evaluation.fidelity import tabular_fidelity

    real = ctx.dataset(params["data"]["sensitive"])
    rep = tabular_fidelity(_source_data(params, ctx), real, max_rows=params.get("max_rows"),
                           seed=int(params.get("seed", 0)))
    return {"marginal": rep.marginal, "correlation": rep.correlation}


@register_cell("mia")
def mia_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Membership inference on the upstream checkpoint (PrivORL Table VI): members ``data.sensitive`` (the target's
    fine-tuning set), non-members ``data.holdout``; the public pre-trained checkpoint the target was fine-tuned from,
    when there is one, is the reference model. With a ``pretrain`` upstream it attacks a model that never saw the
    members (a control: any signal there is distribution shift between the two sets, not leakage)."""
    from privsynth.evaluation.mia import ReferenceAttack, as_adapter, make_attack, run_audit
    from privsynth.synth import registry

    model_path, _ = upstream_model(ctx)
    target = registry.load(model_path)
    pre_id = ctx.upstream.upstream
    reference = None
    if pre_id and (ctx.suite_dir / "artifacts" / pre_id / "model.pt").exists():
        reference = as_adapter(registry.load(ctx.suite_dir / "artifacts" / pre_id / "model.pt"))
    attacks = []
    for spec in params.get("attacks", [{"name": "loss"}, {"name": "pia"}, {"name": "loss_ref"}]):
        spec = dict(spec)
        name = spec.pop("name")
        if name.endswith("_ref"):
            if reference is None:
                continue
            attacks.append(ReferenceAttack(make_attack(name[: -len("_ref")], **spec), reference))
        else:
            attacks.append(make_attack(name, **spec))
    members = ctx.dataset(params["data"]["sensitive"])  # the suite keeps it equal to the target's fine-tuning set
    non_members = ctx.dataset(params["data"]["holdout"])
    unit, max_units, seed = params.get("unit", "transition"), params.get("max_units", 1000), int(params.get("seed", 0))
    n_boot = int(params.get("bootstrap", 0))
    flat: dict[str, Any] = {}
    audits = {}
    if attacks:
        audits["audit"] = run_audit(target, members, non_members, attacks, unit=unit, max_units=max_units, seed=seed,
                                    n_boot=n_boot)
    if params.get("data_attacks"):  # data-only attacks on the released rows of the upstream synthesize cell
        from privsynth.evaluation.mia import make_data_attack, run_data_audit

        release_path = ctx.upstream_dir / "synthetic.npz"
        if not release_path.exists():
            raise InvalidData(f"mia cell {ctx.cell_id}: data-only attacks need the upstream cell's samples "
                              "(num_samples > 0)")
        ref_name = params["data"].get("reference")
        data_reference = ctx.dataset(ref_name) if ref_name else None
        data_attacks = [make_data_attack(dict(spec)["name"], unit, **{k: v for k, v in spec.items() if k != "name"})
                        for spec in params["data_attacks"]]
        audits["data_audit"] = run_data_audit(load_dataset_file(release_path), members, non_members, data_attacks,
                                              reference=data_reference, unit=unit, max_units=max_units, seed=seed,
                                              n_boot=n_boot)
    if not audits:
        raise InvalidData(f"mia cell {ctx.cell_id} has no attack to run")
    flat.update(audits)
    for audit in audits.values():
        for name, att in audit["attacks"].items():
            flat[f"{name}_auc"] = att["auc"]
            for alpha, tpr in att["tpr_at_fpr"].items():
                flat[f"{name}_tpr@{float(alpha) * 100:g}%"] = tpr
                if "ci" in att:  # bootstrap interval ends as numbers, so tables can show them
                    lo, hi = att["ci"]["tpr_at_fpr"][alpha]
                    flat[f"{name}_tpr@{float(alpha) * 100:g}%_lo"], flat[f"{name}_tpr@{float(alpha) * 100:g}%_hi"] = lo, hi
            if "ci" in att:
                flat[f"{name}_auc_lo"], flat[f"{name}_auc_hi"] = att["ci"]["auc"]
    return flat


@register_cell("cost")
def cost_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Resource cost of the upstream synthesize cell (PrivORL Table XI): wall time per phase, time per optimiser step,
    sampling throughput, checkpoint size, parameters, peak memory of the worker process. Reads a pipeline cell
    (``model.pt``) and a registry cell (``model.ckpt``, whose ``fit_seconds`` also counts its pre-training) alike."""
    model, finetune_seconds = upstream_model(ctx, need_model=False)  # no model file: no checkpoint_mb
    res = ctx.upstream.result or {}
    if finetune_seconds is None:
        raise InvalidData(f"cost cell {ctx.cell_id}: upstream cell {ctx.upstream.id} recorded no finetune_seconds or "
                          "fit_seconds (is it a synthesize cell?)")
    out: dict[str, Any] = {"finetune_seconds": finetune_seconds}
    for k in ("fit_seconds", "pretrain_seconds", "sample_seconds", "n_parameters", "peak_rss_mb"):
        if result_value(res, k) is not None:
            out[k] = result_value(res, k)
    steps = res.get("dp_steps")
    if steps:
        out["seconds_per_step"] = finetune_seconds / steps
    if res.get("sample_seconds") and res.get("n_synthetic"):
        out["samples_per_second"] = res["n_synthetic"] / res["sample_seconds"]
    if model is not None:
        files = [model] if model.is_file() else [p for p in model.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        out["checkpoint_mb"] = size / 2**20
    out["private"] = ctx.upstream.params.get("epsilon") is not None
    # the upstream's holder-only figures stay the holder's, and so does the time per step derived from them
    public_only = bool(res.get("public_only"))
    return holder_only(out, *_WORKER) if public_only else holder_only(out, *_SENSITIVE_TIMES, "seconds_per_step",
                                                                         *_WORKER)
