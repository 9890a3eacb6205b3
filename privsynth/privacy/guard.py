"""The release guard: nothing leaves privsynth whose ledger exceeds the caller's budget (docs/DESIGN.md invariant 3).

:func:`check_budget` raises :class:`~privsynth.errors.BudgetExceeded`. :func:`guarded_write` writes an artifact
(file or directory) to a temporary sibling path, checks the ledger, and renames it into place; on refusal or on any
error the temporary path is removed and whatever was at the destination before is untouched (invariant 5).
"""
from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from privsynth.errors import BudgetExceeded, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.ledger import Ledger

__all__ = ["check_budget", "guarded_write", "guarded_save_model", "LEDGER_FILE", "CARD_FILE"]

LEDGER_FILE = "privacy_ledger.json"
CARD_FILE = "privacy_card.md"
_SLACK = 1e-9  # ε equal to the budget passes; rounding noise in the last digits must not refuse it


def check_budget(ledger: Ledger, epsilon_budget: float, delta: float | None = None) -> float:
    """Return the ledger's composed ε at ``delta`` (default: the ledger's δ); raise if it exceeds ``epsilon_budget``.

    Also refuses a ledger that is not evidence of a DP release: an empty one (everything privsynth releases was
    trained on sensitive data, so an empty ledger means the accounting is missing, not that nothing was spent), and
    one whose noise came from a recorded seed (:data:`privsynth.privacy.noise.NOT_DP_NOTE`) or whose events do not say
    where their noise came from (fails closed: :attr:`Ledger.reproducible_noise`).
    """
    acc.check_epsilon(epsilon_budget, "epsilon budget")
    if ledger is None or not ledger.events:
        raise PrivacyError("refusing to release: the ledger records no DP mechanism (empty ledger)")
    if ledger.reproducible_noise:
        raise PrivacyError("refusing to release: the privacy noise was drawn from a recorded seed, or its source is not "
                           "recorded (not DP: noise reproducible or untagged)")
    if delta is not None and delta < ledger.delta:
        raise PrivacyError(f"the budget's delta {delta:g} is below the ledger's delta {ledger.delta:g}")
    spent, rule = ledger.compose(delta)
    if spent > epsilon_budget * (1 + _SLACK):
        raise BudgetExceeded(
            f"refusing to release: the ledger spends epsilon {spent:.4g} at delta {delta or ledger.delta:g} "
            f"({rule}), over the budget of {epsilon_budget:g}"
        )
    return spent


def guarded_write(
    path: str | os.PathLike,
    write: Callable[[Path], None],
    ledger: Ledger,
    epsilon_budget: float,
    delta: float | None = None,
    *,
    attach_ledger: bool = True,
) -> Path:
    """Write an artifact atomically if and only if ``ledger`` fits in the budget.

    ``write(tmp)`` must create ``tmp`` (a file or a directory). The budget is checked before anything is written and
    again before the rename. With ``attach_ledger`` and a directory artifact, the ledger (JSON) and the privacy card
    (markdown) are written inside it. Returns the final path.
    """
    dest = Path(path)
    check_budget(ledger, epsilon_budget, delta)  # refuse before spending time writing
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        if not tmp.exists():
            raise PrivacyError(f"the writer did not create the artifact for {dest}")
        if attach_ledger and tmp.is_dir():
            (tmp / LEDGER_FILE).write_text(ledger.to_json())
            (tmp / CARD_FILE).write_text(ledger.render_markdown())
        check_budget(ledger, epsilon_budget, delta)
        if dest.is_dir() and not dest.is_symlink():
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        _remove(tmp)
        if old.exists() and not dest.exists():
            os.replace(old, dest)
        raise
    return dest


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink()


def guarded_save_model(synth: object, path: str | os.PathLike, epsilon_budget: float,
                       delta: float | None = None) -> Path:
    """Save a DP fine-tuned synthesizer's checkpoint through the guard: a model trained on sensitive data is a
    release too (invariant 3), so it is written only if its ledger (which the checkpoint carries) fits the budget.
    ``synth.save(path)`` must write exactly ``path``."""
    ledger = getattr(synth, "ledger", None)
    return guarded_write(path, lambda tmp: synth.save(tmp), ledger, epsilon_budget, delta,  # type: ignore[attr-defined]
                         attach_ledger=False)
