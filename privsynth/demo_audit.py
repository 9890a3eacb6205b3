"""The demo's membership audit and what keeps it valid (used by :mod:`privsynth.demo` only; nothing else imports it).

The one-run ε lower bound (:mod:`privsynth.evaluation.mia.epsilon`) tests the card's claim only when each audited
unit's membership was drawn at random, independently of the records, *at the card's privacy unit*. So:

* the demo splits the sensitive set at its privacy unit (:func:`privsynth.data.split.split_for_unit`: by transition
  for a transition-level release, by episode for a trajectory-level one), the same random split as ``privsynth
  datasets split --by ...`` under the demo's seed;
* the fine-tuning sees exactly the members: a fine-tuned checkpoint left in the work folder by an earlier run is
  resumed only when a stamp says it was fine-tuned on the same member rows with the same (ε, δ, unit)
  (:func:`drop_stale_finetune`), so a store re-split by a newer demo never audits a model that saw non-members;
* :func:`run_demo_audit` runs the attacks of ``privsynth audit`` with the same settings (white-box loss and
  reference-calibrated loss on the released EMA weights, data-only DCR on the released rows), tests them against the
  card's ε with Bonferroni over the three, and writes ``audit.json`` / ``audit.md`` / ``audit_roc.png`` in the CLI's
  format; :func:`rerun_command` is the ``privsynth audit`` command that repeats it from the store and the work folder.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any, Callable

__all__ = ["WHITE_BOX", "DATA_ONLY", "SIGMA", "REPEATS", "rows_key", "drop_stale", "finetune_key", "drop_stale_finetune",
           "stamp_finetune", "run_demo_audit", "rerun_command"]

WHITE_BOX = ("loss", "loss_ref")  # attacks on the released EMA weights (loss_ref: calibrated by the public model)
DATA_ONLY = ("dcr",)  # attacks on the released rows (no reference records: none are disjoint from the sensitive set)
SIGMA, REPEATS = 0.1, 16  # the loss attack's noise level (PrivORL) and draws averaged per candidate
STAMP = "finetuned.members"  # beside finetuned.pt: the key of the members and settings it was fine-tuned on
_CARD_KEYS = ("epsilon", "delta", "unit", "accountant", "private", "synthesizer", "neighbouring_relation")


def rows_key(datasets: Any, **settings: Any) -> str:
    """SHA-256 of the datasets' names and rows and of ``settings`` (a work-folder stamp, never released)."""
    import numpy as np

    from privsynth.data.dataset import ARRAY_FIELDS

    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for ds in datasets:
        h.update(ds.info.name.encode())
        for name in ARRAY_FIELDS:
            h.update(np.ascontiguousarray(getattr(ds, name)).tobytes())
    return h.hexdigest()


def finetune_key(members: Any, *, epsilon: float, delta: float, unit: str) -> str:
    """The key of a fine-tune: the member rows and the DP settings it used."""
    return rows_key([members], epsilon=epsilon, delta=delta, unit=unit)


def drop_stale(workdir: Path, stamp: str, key: str, checkpoints: tuple[str, ...], also: tuple[str, ...],
               log: Callable[[str], None], why: str) -> None:
    """Delete ``checkpoints`` (and ``also``, made from them) in ``workdir`` unless the stamp file ``stamp`` holds
    ``key``; nothing to do when none of the checkpoints exists."""
    paths = [workdir / n for n in checkpoints]
    if not any(p.exists() for p in paths):
        return
    if (workdir / stamp).exists() and (workdir / stamp).read_text().strip() == key:
        return
    for path in (*paths, *(workdir / n for n in also), workdir / stamp):
        path.unlink(missing_ok=True)
    log(f"  discarded {', '.join(checkpoints)} in {workdir}: {why}")


def drop_stale_finetune(workdir: Path, key: str, log: Callable[[str], None]) -> None:
    """Delete ``workdir/finetuned.pt`` unless its stamp holds ``key`` (the pre-trained checkpoint, public, stays)."""
    drop_stale(workdir, STAMP, key, ("finetuned.pt",), (), log,
               "fine-tuned on other members or settings than this run's; fine-tuning again")


def stamp_finetune(workdir: Path, key: str) -> None:
    if (workdir / "finetuned.pt").exists():
        (workdir / STAMP).write_text(key + "\n")


def run_demo_audit(synth: Any, reference: Any, synthetic: Any, members: Any, non_members: Any, *, unit: str,
                   max_units: int, seed: int, out: Path, command: str | None = None,
                   checkpoint: str = "the released (EMA) weights") -> dict[str, Any]:
    """The audit report of ``privsynth audit`` for the demo's release: data-only attacks on ``synthetic``, white-box
    attacks on ``synth`` (``reference``: the public pre-trained model), each tested against the release card's ε;
    ``members`` / ``non_members`` should carry their recorded split (``info.extra["split"]``). Writes
    ``out/audit.json``, ``out/audit.md`` and ``out/audit_roc.png``; returns the report."""
    from privsynth.evaluation.mia import LossAttack, ReferenceAttack, as_adapter, make_data_attack, run_audit
    from privsynth.evaluation.mia.audit import infer_split, run_data_audit, withhold_unsupported
    from privsynth.evaluation.mia.epsilon import EpsilonTest, assess_claim, claim_of
    from privsynth.evaluation.mia.report import write_report

    card = {k: v for k, v in (synthetic.info.privacy_card or {}).items() if k in _CARD_KEYS}
    claim, _ = claim_of(card)
    tests = len(WHITE_BOX) + len(DATA_ONLY)
    test = None if claim is None else EpsilonTest(
        epsilon=claim["epsilon"], delta=claim["delta"], relation=claim["relation"], confidence=1 - 0.05 / tests,
        family_confidence=0.95, tests=tests, seed=seed)  # fixed before any score is seen, as the CLI does
    white = [LossAttack(sigma=SIGMA, repeats=REPEATS),
             ReferenceAttack(LossAttack(sigma=SIGMA, repeats=REPEATS), as_adapter(reference))]
    report: dict[str, Any] = {
        "title": f"MIA audit of {synthetic.info.name}",
        "target": {"release": synthetic.info.name, "checkpoint": checkpoint,
                   "members": members.info.name, "non_members": non_members.info.name, "unit": unit},
        "card": card, "command": command}
    report["data_only"] = withhold_unsupported(run_data_audit(
        synthetic, members, non_members, [make_data_attack(n, unit) for n in DATA_ONLY], unit=unit,
        max_units=max_units, seed=seed, n_boot=0, test=test))
    report["white_box"] = withhold_unsupported(run_audit(
        synth, members, non_members, white, unit=unit, max_units=max_units, seed=seed, test=test))
    split = infer_split(members, non_members) if claim is not None else None
    report["epsilon_audit"] = assess_claim(card, unit, split, {"data-only": report["data_only"],
                                                               "white-box": report["white_box"]})
    write_report(report, out / "audit.json", out / "audit.md", out / "audit_roc.png")
    return report


def rerun_command(*, store: str, release: str, members: str, non_members: str, workdir: str, unit: str, seed: int,
                  max_units: int, out: str) -> str:
    """The ``privsynth audit membership`` command that repeats :func:`run_demo_audit` from the store and the work
    folder."""
    argv = ["privsynth", "--store", store, "audit", "membership", "--release", release,
            "--checkpoint", f"{workdir}/finetuned.pt",
            "--reference-model", f"{workdir}/pretrained.pt", "--attacks", ",".join(WHITE_BOX), "--repeats",
            str(REPEATS), "--members", members, "--non-members", non_members]
    if unit != "transition":
        argv += ["--unit", unit]
    if max_units != 1000:
        argv += ["--max-units", str(max_units)]
    argv += ["--seed", str(seed), "--out", out]
    return " ".join(shlex.quote(a) for a in argv)
