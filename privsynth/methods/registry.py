"""The method registry: every DP offline-RL method by name, built and run the same way (docs/methods.md).

In the manner of :mod:`privsynth.synth.registry`::

    from privsynth import methods
    method = methods.make("dp-apvi", preset="tiny", epsilon=2.0)     # or config=DPAPVIMethodConfig(...), or overrides
    result = method.run(sensitive)                                   # MethodResult(ledger, policy, dataset, metrics)

==============  ====================================================================  ==============
name            what                                                                  privacy unit
==============  ====================================================================  ==============
``primorl``     PriMORL: DP-FedAvg model ensemble, pessimistic MDP, SAC (Rio et al.)  trajectory
``dp-apvi``     DP-APVI: noisy counts, pessimistic value iteration (Qiao & Wang)     trajectory
``dp-vapvi``    DP-VAPVI: noisy linear-MDP statistics, variance-aware PVI            trajectory
``expert-svt``  expert-level SVT stable-prefix release + selective DP-SGD (Sharma)    expert
``kickstart``   DP release -> teacher -> Dirichlet-noised kickstarting (Gohari)       transition
==============  ====================================================================  ==============

A new method is one adapter class (``name``, ``config_class``, ``_run``) and one :class:`Entry`; the conformance
suite (``tests/test_method_protocol.py``) then runs against it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from privsynth.errors import InvalidData
from privsynth.methods.protocol import MethodAdapter

__all__ = ["Entry", "REGISTRY", "names", "entry", "make", "adapter_class"]


@dataclass(frozen=True)
class Entry:
    """One registered method: where its adapter lives and the overrides of its ``tiny`` preset (seconds, for tests
    and smoke suites; the default preset ``paper`` is the config's own defaults)."""

    name: str
    summary: str
    unit: str
    adapter: str  # "module:Class", imported on first use
    tiny: dict[str, Any] = field(default_factory=dict)


_A = "privsynth.methods.adapters"
REGISTRY: dict[str, Entry] = {
    e.name: e
    for e in (
        Entry("primorl", "PriMORL: private model ensemble, pessimistic MDP, SAC in the model", "trajectory",
              f"{_A}.primorl:PriMORLMethod",
              tiny={"pipeline": {"tdp": {"rounds": 4, "sample_rate": 0.25, "eval_every": 2, "local_batch": 50},
                                 "sac": {"epochs": 1, "steps_per_epoch": 5, "batch": 32, "hidden": (32, 32),
                                         "rollout_batch": 20, "horizon": 5},
                                 "public_episodes": 2, "eval_episodes": 1}}),
        Entry("dp-apvi", "DP-APVI: noisy visitation counts, pessimistic value iteration", "trajectory",
              f"{_A}.dp_apvi:DPAPVIMethod", tiny={"n_synthetic": 20}),
        Entry("dp-vapvi", "DP-VAPVI: noisy linear-MDP statistics, variance-aware pessimistic value iteration",
              "trajectory", f"{_A}.dp_vapvi:DPVAPVIMethod", tiny={"env": {"H": 5, "A": 10}}),
        Entry("expert-svt", "expert-level DP: SVT stable-prefix release + selective DP-SGD", "expert",
              f"{_A}.expert_svt:ExpertSVTMethod",
              tiny={"n_rounds": 5, "steps": 30, "batch_size": 16, "eval_episodes": 2, "accountant": "rdp"}),
        Entry("kickstart", "DP synthetic release -> BC teacher -> privacy-aware kickstarted PPO", "transition",
              f"{_A}.kickstart:KickstartMethod",
              tiny={"synthesizer_preset": "tiny", "bc_epochs": 2, "n_synthetic": 2000, "public_episodes": 3,
                    "kick": {"student": {"epochs": 1, "steps_per_epoch": 200, "train_pi_iters": 2,
                                         "train_v_iters": 2, "max_ep_len": 200}},
                    "eval_episodes": 1}),
    )
}


def names() -> list[str]:
    """Registered method names, in the table's order."""
    return list(REGISTRY)


def entry(name: str) -> Entry:
    if name not in REGISTRY:
        raise InvalidData(f"unknown method '{name}': choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def adapter_class(name: str) -> type[MethodAdapter]:
    module, cls = entry(name).adapter.split(":")
    return getattr(importlib.import_module(module), cls)


def make(name: str, *, preset: str = "paper", config: Any = None, **overrides: Any) -> MethodAdapter:
    """A method by name with its config: the paper defaults (``preset="paper"``) or the ``tiny`` preset, or a config
    object, then field overrides (a dict updates a nested section, e.g. ``pipeline={"tdp": {"rounds": 50}}``)."""
    from privsynth.config_io import override as _override  # one override rule for synthesizers and methods

    cls = adapter_class(name)
    if config is None:
        if preset not in ("paper", "tiny"):
            raise InvalidData(f"unknown preset '{preset}' for {name}: choose paper or tiny")
        config = cls.config_class()
        if preset == "tiny":
            _override(config, _tuples(entry(name).tiny))
    elif not isinstance(config, cls.config_class):
        raise InvalidData(f"{name} takes a {cls.config_class.__name__}, got {type(config).__name__}")
    return cls(_override(config, _tuples(overrides)), unit=entry(name).unit)


def _tuples(overrides: dict[str, Any]) -> dict[str, Any]:
    """YAML gives lists where the configs hold tuples (layer sizes)."""
    return {k: _tuples(v) if isinstance(v, dict) else tuple(v) if isinstance(v, list) else v
            for k, v in overrides.items()}
