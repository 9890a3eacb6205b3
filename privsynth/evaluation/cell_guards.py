"""Privacy guards of the benchmark's ``pretrain`` and ``synthesize`` cells (:mod:`privsynth.evaluation.cells`).

Each guard refuses with a one-line error, so the cell fails and nothing of it is written:

* :func:`public_datasets` / :func:`check_public_specs` (:mod:`privsynth.data.provenance`): a cell's public
  (pre-training, normaliser, calibration) data is not its sensitive set, not marked sensitive, and not derived (``split_of``) from the same data as the sensitive set;
  decided from the suite's dataset specs, no sensitive record read (docs/DESIGN.md: public data holds no sensitive
  record, as :func:`privsynth.release.checks.check_public` enforces for the CLI).
* :func:`check_public_only_model`: a ``finetune: none`` row (ε = 0, "the public model alone") samples a model that
  was only pre-trained on public data: no fine-tune, no ledger.
* The DP rows' budget check (the ledger's total ε within the cell's, invariant 3) is the release route's own:
  :func:`privsynth.release.synthesize` runs them (issue 38).
"""
from __future__ import annotations

from typing import Any

from privsynth.data.provenance import check_public_specs, data_origin  # the release path decides with them too
from privsynth.errors import InvalidData, PrivacyError

__all__ = ["public_datasets", "check_public_specs", "data_origin", "check_public_only_model",
           "check_pretrained_on_public"]


def public_datasets(params: dict[str, Any], ctx: Any) -> list:
    """The cell's public datasets; refuses the sensitive one, any dataset marked sensitive (as the CLI does) and, from
    the suite's specs (``ctx.datasets``), any dataset derived from the same data as the sensitive one. A stand-in
    context without specs (unit tests) gets the name and flag checks only; a :class:`CellContext` always has them."""
    names = params["data"]["public"]
    names = [names] if isinstance(names, str) else list(names)
    sensitive = params["data"].get("sensitive")
    if sensitive in names:
        raise PrivacyError(f"dataset '{sensitive}' cannot be both public and sensitive")
    specs = getattr(ctx, "datasets", None)
    if sensitive is not None and specs is not None:
        check_public_specs(names, sensitive, specs)
    datasets = [ctx.dataset(n) for n in names]
    for name, ds in zip(names, datasets):
        if ds.info.sensitive:
            raise PrivacyError(f"dataset '{name}' is marked sensitive and cannot be used as public data")
    return datasets


def check_public_only_model(synth: Any, ctx: Any) -> None:
    """``finetune: none`` (the ε = 0 "public model alone" row): refuse unless the upstream is a ``pretrain`` cell and
    the loaded model has no fine-tune in its history and carries no privacy ledger.

    Protects: the row labelled public-only / ε = 0 is computed from public data alone (no sensitive record, DP or not,
    reached the weights it samples)."""
    kind = getattr(ctx.upstream, "kind", None)
    if kind != "pretrain":
        raise InvalidData(f"cell {ctx.cell_id}: finetune: none samples the public pre-trained model alone; its "
                          f"upstream must be a pretrain cell, not a {kind} cell")
    tuned = any(h.get("phase") == "finetune" for h in getattr(synth, "history", []) or [])
    if tuned or getattr(synth, "nonprivate_finetunes", 0) or getattr(synth, "ledger", None) is not None:
        raise InvalidData(f"cell {ctx.cell_id}: finetune: none needs a model never fine-tuned on sensitive data, but "
                          f"the upstream model has {'a fine-tune' if tuned else 'a privacy ledger'}")


def check_pretrained_on_public(synth: Any, sensitive: str, ctx: Any) -> None:
    """The public datasets a loaded upstream model was pre-trained on (``synth.public_data``, suite names) against
    this cell's sensitive set (:func:`check_public_specs`): a pretrain cell need not name the sensitive set itself."""
    specs = getattr(ctx, "datasets", None)
    if specs is None:
        return
    # names from elsewhere (a model pre-trained outside this suite) cannot be traced through the suite's specs
    names = [n for n in getattr(synth, "public_data", []) or [] if n in specs]
    if names:
        check_public_specs(names, sensitive, specs)

