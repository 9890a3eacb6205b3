"""The guarded release: check the ledger against the budget, post-process, write to the Minari store through
:func:`privsynth.privacy.guard.guarded_write`, the one writer of every DP artifact (docs/DESIGN.md invariant 3)."""
from __future__ import annotations

from typing import Any

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import PrivacyError, PrivsynthError
from privsynth.release.support import prepare_release

__all__ = ["release_dataset"]

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
        from privsynth.data import minari_io
        from privsynth.privacy.guard import guarded_write

        final = minari_io.target_path(dataset_id)
        if final.exists() and not overwrite:
            raise PrivsynthError(f"dataset '{dataset_id}' already exists; pass --overwrite (overwrite=True) to replace it")
        if environment is not None:
            dataset = prepare_release(dataset, environment)
        # the one writer of guarded artifacts: budget checked again, written aside, renamed into place
        guarded_write(final, lambda tmp: minari_io.write_dataset_dir(dataset, dataset_id, tmp), ledger,
                      epsilon_budget, delta, attach_ledger=False)
    return spent
