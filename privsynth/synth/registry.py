"""The synthesizer registry: every synthesizer by name, built, fitted, sampled and loaded the same way.

Why this module is long: it is the one door (make, fit, sample, load, register) and the one table of entries with
their units, checkpoint formats and release capabilities; each part needs the table, and splitting them would give
the table two homes.

In the manner of d3rlpy's ``Config.create()`` and scikit-learn's estimators::

    from privsynth.synth import registry
    synth = registry.make("privorl-j", preset="cpu")                  # or config=TrajSynthConfig(...), or overrides
    registry.fit(synth, sensitive, public=[pub], epsilon=10, delta=1e-5, unit="trajectory")
    ds = registry.sample(synth, n_transitions=50_000)                 # or n_episodes=...; an OfflineDataset either way
    synth.save("ckpt"); same = registry.load("ckpt")                  # dispatch on the checkpoint's format tag

=================  ============================================================  ========================
name               what                                                          privacy units
=================  ============================================================  ========================
``privorl-n``      EDM diffusion, residual MLP over transitions (PrivORL-n)      transition, trajectory
``privorl-j``      diffusion transformer over fragments, stitched (PrivORL-j)    trajectory
``privorl-j-unet`` the same with a temporal U-Net backbone                       trajectory
``dp-transformer`` autoregressive transformer over fragments                     trajectory
``pgm``            MST + Private-PGM marginals                                   transition
``privsyn``        PrivSyn marginals + GUM                                       transition
``pategan``        PATE-GAN                                                      transition
``prepategan``     PATE-GAN with a generator pre-trained on public data          transition
=================  ============================================================  ========================

A new synthesizer is registered with one :class:`Entry` (:func:`register`; ``formats`` and ``loader`` let
:func:`load` read its checkpoints); the conformance suite (``tests/test_registry.py``) and the neighbour test then run
against the built-in entries without further code.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privsynth.data.dataset import OfflineDataset
from privsynth.data.units import DATA_UNITS
from privsynth.errors import InvalidData, PrivacyError, PrivsynthError, naming_file
from privsynth.config_io import override
from privsynth.synth.base import Synthesizer

__all__ = ["Entry", "REGISTRY", "register", "unregister", "names", "entry", "make", "load", "check_unit", "pretrain", "fit", "sample", "name_of"]


@dataclass(frozen=True)
class Entry:
    """One registered synthesizer: how to build it from a preset, a config object or overrides."""

    name: str
    summary: str
    units: tuple[str, ...]
    build: Callable[[str, Any, dict[str, Any]], Synthesizer]  # (preset, config or None, overrides) -> synthesizer
    episodes: bool = False  # native output is whole episodes (trajectory synthesizers)
    extra: str | None = None  # optional dependency (pip extra) the synthesizer needs
    # the checkpoint tags this entry reads (a torch checkpoint's "format", else its "synthesizer"; a JSON checkpoint's
    # "synthesizer") and the function that reads them; :func:`load` dispatches on them
    formats: tuple[str, ...] = ()
    loader: Callable[[Path], Synthesizer] | None = None
    # optional capabilities of the release route (privsynth.release.synthesize), asked for by name, never inferred
    # from the synthesizer's name: "staged" (pre-train / fine-tune stages in a workdir, resumable), "pretrained" (start
    # from a shipped or saved public checkpoint), "no_pretrain" (the DPDM ablation), "dp_normalizer" (a DP normaliser
    # within public bounds when there is no public data), "public_bounds" (without public data: the environment's bounds,
    # --obs-bounds and --reward-bounds fix what public data would), "warm_start" (without public data: pre-training
    # on rows drawn from an accounted DP summary, privsynth.synth.warmstart), "policy_relabel" (a share of epsilon on a
    # DP behaviour policy that relabels the sampled actions before the simulator repair, privsynth.release.relabel)
    capabilities: frozenset[str] = frozenset()


CAPABILITIES = frozenset({"staged", "pretrained", "no_pretrain", "dp_normalizer", "public_bounds", "warm_start",
                          "policy_relabel"})


def _transition_tiny() -> Any:
    """Seconds, not minutes: for tests and smoke runs."""
    from privsynth.synth.config import DenoiserConfig, cpu_config

    cfg = cpu_config()
    cfg.denoiser = DenoiserConfig(width=32, depth=2, cond_dim=16)
    cfg.pretrain.max_steps, cfg.pretrain.batch_size = 12, 32
    cfg.finetune.batch_size, cfg.finetune.epochs = 16, 1.0
    cfg.curiosity.pool_size, cfg.curiosity.refresh_every, cfg.curiosity.sample_steps = 32, 4, 4
    cfg.sampler.steps = 6
    return cfg


def _build_transition(preset: str, config: Any, overrides: dict[str, Any]) -> Synthesizer:
    from privsynth.synth import config as tc
    from privsynth.synth.transition import TransitionSynthesizer

    presets = {"paper": tc.paper_config, "cpu": tc.cpu_config, "demo": tc.demo_config, "tiny": _transition_tiny}
    if config is None:
        if preset not in presets:
            raise InvalidData(f"unknown preset '{preset}' for privorl-n: choose {', '.join(presets)}")
        config = presets[preset]()
    return TransitionSynthesizer(override(config, overrides))


def _build_trajectory(backbone: str) -> Callable[[str, Any, dict[str, Any]], Synthesizer]:
    def build(preset: str, config: Any, overrides: dict[str, Any]) -> Synthesizer:
        from privsynth.synth.trajectory import TrajectorySynthesizer
        from privsynth.synth.trajectory.config import PRESETS

        if config is None:
            if preset not in PRESETS:
                raise InvalidData(f"unknown preset '{preset}' for the trajectory synthesizers: choose {', '.join(PRESETS)}")
            config = PRESETS[preset](backbone) if preset != "paper" else dataclasses.replace(PRESETS["paper"](), backbone=backbone)
        elif config.backbone != backbone:
            raise InvalidData(f"the config's backbone is '{config.backbone}' but the synthesizer asked for is '{backbone}'")
        return TrajectorySynthesizer(override(config, overrides))
    return build


_TINY_BASELINES: dict[str, dict[str, Any]] = {
    "pgm": {"iters": 50},
    "privsyn": {"gum_rounds": 3},
    "pategan": dict(teachers=3, iterations=10, queries=100, student_steps=2, batch_size=16, generator_units=16,
                    discriminator_units=16, noise_dim=4),
}
_TINY_BASELINES["prepategan"] = {**_TINY_BASELINES["pategan"], "pretrain_steps": 5}


def _load_transition(path: Path) -> Synthesizer:
    from privsynth.synth.transition import TransitionSynthesizer

    return TransitionSynthesizer.load(path)


def _load_trajectory(path: Path) -> Synthesizer:
    from privsynth.synth.trajectory import TrajectorySynthesizer

    return TrajectorySynthesizer.load(path)


def _load_baseline(name: str) -> Callable[[Path], Synthesizer]:
    def load(path: Path) -> Synthesizer:
        from privsynth.synth.baselines import BASELINES

        return BASELINES[name][0].load(path)
    return load


# the format tags of the built-in torch checkpoints (kept here as strings so the registry imports no torch module;
# tests/test_registry.py checks they equal the classes' FORMAT constants)
TRANSITION_FORMAT = "privsynth.transition-synth/1"
TRAJECTORY_FORMAT = "privsynth.trajectory-synth/1"


def _build_baseline(name: str) -> Callable[[str, Any, dict[str, Any]], Synthesizer]:
    def build(preset: str, config: Any, overrides: dict[str, Any]) -> Synthesizer:
        from privsynth.synth.baselines import BASELINES, make_baseline

        if config is not None:
            cls, cfg_cls = BASELINES[name]
            if not isinstance(config, cfg_cls):
                raise InvalidData(f"{name} takes a {cfg_cls.__name__}, got {type(config).__name__}")
            return cls(override(config, overrides))
        if preset not in ("cpu", "paper", "tiny"):
            raise InvalidData(f"unknown preset '{preset}' for {name}: choose cpu, paper or tiny")
        return make_baseline(name, **{**(_TINY_BASELINES.get(name, {}) if preset == "tiny" else {}), **overrides})
    return build


REGISTRY: dict[str, Entry] = {
    e.name: e
    for e in (
        Entry("privorl-n", "EDM diffusion with a residual MLP over transitions (PrivORL-n)", DATA_UNITS,
              _build_transition, formats=(TRANSITION_FORMAT,), loader=_load_transition, capabilities=CAPABILITIES),
        # the three trajectory synthesizers share one checkpoint format; the config's backbone names which one it is
        Entry("privorl-j", "diffusion transformer over trajectory fragments, stitched (PrivORL-j)", ("trajectory",),
              _build_trajectory("transformer"), episodes=True, formats=(TRAJECTORY_FORMAT,), loader=_load_trajectory),
        Entry("privorl-j-unet", "PrivORL-j with a temporal U-Net backbone", ("trajectory",), _build_trajectory("unet"),
              episodes=True, formats=(TRAJECTORY_FORMAT,), loader=_load_trajectory),
        Entry("dp-transformer", "autoregressive transformer over trajectory fragments", ("trajectory",),
              _build_trajectory("dp-transformer"), episodes=True, formats=(TRAJECTORY_FORMAT,),
              loader=_load_trajectory),
        Entry("pgm", "MST selection + Private-PGM marginals", ("transition",), _build_baseline("pgm"), extra="pgm",
              formats=("pgm",), loader=_load_baseline("pgm")),
        Entry("privsyn", "PrivSyn: DP marginals + gradually updated synthetic data", ("transition",),
              _build_baseline("privsyn"), formats=("privsyn",), loader=_load_baseline("privsyn"),
              capabilities=frozenset({"public_bounds"})),
        Entry("pategan", "PATE-GAN: teacher-vote DP discriminator", ("transition",), _build_baseline("pategan"),
              formats=("pategan",), loader=_load_baseline("pategan")),
        Entry("prepategan", "PATE-GAN with a generator pre-trained on public data", ("transition",),
              _build_baseline("prepategan"), formats=("prepategan",), loader=_load_baseline("prepategan")),
    )
}


def register(new: Entry, *, replace: bool = False) -> Entry:
    """Add a synthesizer to the registry, so :func:`make`, :func:`fit`, :func:`sample`, :func:`load`, the CLI's
    ``--synth`` and the conformance suite reach it. Give it ``formats`` and a ``loader`` for :func:`load` to read its
    checkpoints. A taken name is refused unless ``replace``."""
    if not isinstance(new, Entry):
        raise TypeError(f"register takes an Entry, got {type(new).__name__}")
    if new.name in REGISTRY and not replace:
        raise InvalidData(f"a synthesizer named '{new.name}' is already registered (pass replace=True to swap it)")
    if not new.units or any(u not in DATA_UNITS for u in new.units):
        raise InvalidData(f"{new.name}: units must be 'transition' and/or 'trajectory', got {new.units!r}")
    if not set(new.capabilities) <= CAPABILITIES:
        raise InvalidData(f"{new.name}: unknown capabilities {sorted(set(new.capabilities) - CAPABILITIES)}; "
                          f"known: {', '.join(sorted(CAPABILITIES))}")
    if bool(new.formats) != (new.loader is not None):
        raise InvalidData(f"{new.name}: give both formats and a loader (load reads checkpoints by their tag), or neither")
    REGISTRY[new.name] = new
    return new


def unregister(name: str) -> None:
    """Remove a synthesizer added with :func:`register` (tests, plug-ins that unload)."""
    entry(name)
    del REGISTRY[name]


def names() -> list[str]:
    """Registered synthesizer names, in the table's order."""
    return list(REGISTRY)


def entry(name: str) -> Entry:
    if name not in REGISTRY:
        raise InvalidData(f"unknown synthesizer '{name}': choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def make(name: str, *, preset: str = "cpu", config: Any = None, **overrides: Any) -> Synthesizer:
    """A new synthesizer by name: from a preset (``cpu`` default, ``paper``, ``tiny``; ``demo`` for privorl-n), a
    config object, and field overrides (a dict updates a nested section, e.g. ``finetune={"epochs": 50}``). A
    synthesizer whose optional dependency is missing is refused here, before any data is read or model trained."""
    e = entry(name)
    if e.extra == "pgm":
        import importlib.util

        if importlib.util.find_spec("mbi") is None:
            raise InvalidData("the PGM baseline needs the private-pgm package: pip install 'privsynth[pgm]' "
                              "(installs mbi and jax)")
    synth = e.build(preset, config, overrides)
    synth.registry_name = name  # type: ignore[attr-defined]
    return synth


def name_of(synth: Synthesizer) -> str:
    """The registered name of a synthesizer object."""
    name = getattr(synth, "registry_name", None)
    if name in REGISTRY:
        return name
    cfg = getattr(synth, "config", None)
    backbone = getattr(cfg, "backbone", None)
    if backbone is not None:
        return {"transformer": "privorl-j", "unet": "privorl-j-unet", "dp-transformer": "dp-transformer"}[backbone]
    base = getattr(synth, "name", "")
    if base in REGISTRY:
        return base
    raise InvalidData(f"{type(synth).__name__} is not a registered synthesizer (known: {', '.join(names())}): make "
                      "it with privsynth.synth.registry.make, or register it")


def load(path: str | Path) -> Synthesizer:
    """Load any registered synthesizer's checkpoint; the format tag inside the file decides which class reads it.

    Files are read as data (JSON, or torch tensors and plain types with ``weights_only=True``), never unpickled. A
    damaged or hostile file is one :class:`InvalidData` line naming it (privacy errors pass unchanged)."""
    path = Path(path)
    try:
        return _load(path)
    except PrivacyError:
        raise
    except PrivsynthError as exc:
        named = naming_file(exc, path)
        if named is exc:
            raise
        raise named from None
    except Exception as exc:  # noqa: BLE001 - torch and the loaders raise many types for a damaged file
        text = (str(exc).strip().splitlines() or [""])[0][:120]
        raise InvalidData(f"cannot read checkpoint {path}: damaged, or not a privsynth checkpoint "
                          f"({type(exc).__name__}: {text})") from None


def _load(path: Path) -> Synthesizer:
    from privsynth.synth.checkpoint import load_weights_only

    if not path.exists():
        raise InvalidData(f"no synthesizer checkpoint at {path}")
    head = b""
    if path.is_file():
        with path.open("rb") as fh:  # one byte tells JSON from a torch archive; the file is read once, below
            head = fh.read(1)
    if head == b"{":
        try:
            state: Any = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InvalidData(f"{path} is not a privsynth checkpoint (unreadable JSON)") from None
        tag = state.get("synthesizer") if isinstance(state, dict) else None
    else:
        state = load_weights_only(path)  # refuses pickled objects and names damaged files, in one line
        tag = (state.get("format") or state.get("synthesizer")) if isinstance(state, dict) else None
    readers = [e for e in REGISTRY.values() if e.loader is not None and tag in e.formats]
    if not readers:
        raise InvalidData(f"{path} carries no known synthesizer format tag ({tag!r}); registered tags: "
                          f"{', '.join(sorted({f for e in REGISTRY.values() for f in e.formats}))}")
    synth = readers[0].loader(path)  # type: ignore[misc]
    # one entry per tag names it; a shared format (the trajectory synthesizers) is told apart by the loaded config
    synth.registry_name = readers[0].name if len(readers) == 1 else name_of(synth)  # type: ignore[attr-defined]
    return synth


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments it accepts (``progress`` is not universal)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kwargs)
    return fn(*args, **{k: v for k, v in kwargs.items() if k in params})


def check_unit(name: str, unit: str) -> None:
    """Refuse a privacy unit the synthesizer ``name`` does not protect (one line)."""
    if unit not in entry(name).units:
        raise InvalidData(f"{name} protects {' or '.join(entry(name).units)}, not '{unit}'")


def pretrain(synth: Synthesizer, public: OfflineDataset | Sequence[OfflineDataset], *,
             progress: bool = False) -> Synthesizer:
    """Pre-train on public data (the first step of :func:`fit`, callable on its own, e.g. to time it)."""
    _call(synth.pretrain, [public] if isinstance(public, OfflineDataset) else list(public), progress=progress)
    return synth


def fit(
    synth: Synthesizer,
    sensitive: OfflineDataset,
    *,
    public: OfflineDataset | Sequence[OfflineDataset] | None = None,
    budget: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    unit: str | None = None,
    progress: bool = False,
) -> Synthesizer:
    """Pre-train on ``public`` (skipped when ``None``: the synthesizer must already be pre-trained or loaded), then
    DP fine-tune on ``sensitive`` at (ε, δ) and ``unit`` (default: the synthesizer's first unit, so swapping names
    needs no other change); the spent budget lands on ``synth.ledger``.

    Checked before any training: the unit, ε and δ (δ < 1/N at the unit), datasets rather than ids, and public data
    that is not the sensitive data (marked sensitive, other spaces, or sharing any transition with it: pre-training
    reads public data unaccounted). ``sensitive`` is marked sensitive."""
    from privsynth.privacy.budget import as_budget

    name = name_of(synth)
    # the request, built and validated once (a Budget, or its three parts); the unit defaults to the synthesizer's
    budget = as_budget(budget, epsilon=epsilon, delta=delta, unit=unit, default_unit=entry(name).units[0])
    epsilon, delta, unit = budget.epsilon, budget.delta, budget.unit
    check_unit(name, unit)
    if not isinstance(sensitive, OfflineDataset):
        raise InvalidData(f"sensitive must be an OfflineDataset, not {type(sensitive).__name__} (load a stored id "
                          "with privsynth.data.minari_io.load_dataset)")
    sensitive = sensitive.mark_sensitive(True)
    spent = getattr(synth, "ledger", None)
    if spent is not None and spent.events:  # as the baselines always refused
        raise PrivacyError(f"{name} has already been fitted on sensitive data (its ledger spends epsilon "
                           f"{spent.epsilon():.4g}); a second fit would compose with it past the epsilon asked: make a "
                           "new synthesizer")
    budget.check_dataset(sensitive)
    if public is not None:
        pubs = [public] if isinstance(public, OfflineDataset) else public
        if not isinstance(pubs, (list, tuple)) or not all(isinstance(p, OfflineDataset) for p in pubs):
            raise InvalidData("public must be an OfflineDataset or a list of them (load stored ids with "
                              "privsynth.data.minari_io.load_dataset)")
        for pub in pubs:
            pub.check_public_for(sensitive)
        pretrain(synth, public, progress=progress)
    _call(synth.finetune, sensitive, epsilon, delta, unit, progress=progress)
    return synth


def sample(
    synth: Synthesizer,
    *,
    n_transitions: int | None = None,
    n_episodes: int | None = None,
    seed: int | None = None,
    name: str | None = None,
    progress: bool = False,
) -> OfflineDataset:
    """Synthetic data from the released weights, as an :class:`OfflineDataset`, sized in transitions or in episodes.

    Trajectory synthesizers make whole episodes: ``n_transitions`` stitches episodes until there are enough rows and
    cuts the last one (marked truncated). Transition synthesizers make unrelated transitions: ``n_episodes`` asks for
    that many one-transition episodes. Sampling is post-processing of DP outputs: ``seed`` makes it repeatable."""
    if (n_transitions is None) == (n_episodes is None):
        raise InvalidData("ask for exactly one of n_transitions or n_episodes")
    n = n_transitions if n_transitions is not None else n_episodes
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidData(f"the number of {'transitions' if n_transitions is not None else 'episodes'} must be a positive integer, got {n!r}")
    if not entry(name_of(synth)).episodes:
        return _call(synth.sample, n, seed=seed, name=name, progress=progress)
    if n_episodes is not None:
        return _call(synth.sample, n_episodes, seed=seed, name=name, progress=progress)
    return _episodes_to_rows(synth, n_transitions, seed=seed, name=name, progress=progress)


def _episodes_to_rows(synth: Synthesizer, n: int, *, seed: int | None, name: str | None, progress: bool) -> OfflineDataset:
    """``n`` rows from a synthesizer whose native output is whole episodes."""
    sample_transitions = getattr(synth, "sample_transitions", None)
    if sample_transitions is None:
        raise InvalidData(f"{name_of(synth)} samples whole episodes and has no sample_transitions(n): ask for "
                          "n_episodes instead")
    return _call(sample_transitions, n, seed=seed, name=name, progress=progress)
