"""The guarded release: check the ledger against the budget, post-process, write to the Minari store
(docs/DESIGN.md invariant 3)."""
from __future__ import annotations

from typing import Any

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import PrivacyError
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
        from privsynth.data.minari_io import write_dataset

        if environment is not None:
            dataset = prepare_release(dataset, environment)
        write_dataset(dataset, dataset_id, overwrite=overwrite)
    return spent
