"""Release of synthetic datasets (docs/DESIGN.md invariants 3-5, 8).

* :func:`synthesize`: sensitive data in, a guarded Minari release out, for any registered synthesizer
  (:mod:`privsynth.release.pipeline`).
* :func:`release_dataset`: the guard, then post-processing to the environment's support, then the write
  (:mod:`privsynth.release.guarded`, :mod:`privsynth.release.support`).
* The cheap checks that run before any sensitive data is touched (:mod:`privsynth.release.checks`).

Data flows data -> privacy -> synth -> release: this package may import all three.
"""
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
from privsynth.release.pipeline import SynthesisResult, synthesize
from privsynth.release.support import ENV_FACT_FIELDS, environment_facts, prepare_release

__all__ = [
    "release_dataset",
    "synthesize",
    "SynthesisResult",
    "as_dataset",
    "environment_facts",
    "prepare_release",
    "check_release_request",
    "check_public",
    "check_model_fits",
    "check_pretrained_public",
    "record_dp_request",
    "ENV_FACT_FIELDS",
    "load_synthesizer",
    "check_resume_files",
]
