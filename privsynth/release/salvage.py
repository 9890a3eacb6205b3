"""A post-processed release that cannot reach its size: refused before the DP fine-tune when public evidence shows
it, and otherwise not a lost budget (issue 36).

* :func:`check_filters_can_keep`: before any sensitive row is read for training, the filtering steps (``walls``,
  ``goals``) are run on public rows in the release's environment: a few hundred rows of the public datasets and, when
  there is one, samples of the pre-trained (public-only) model. If none survives, the request is refused then.
* :func:`keep_finetuned`: when sampling or post-processing fails after the fine-tune, the fine-tuned model is saved
  through the release guard (:func:`privsynth.privacy.guard.guarded_save_model`, as ``privsynth finetune`` saves) and
  the error says where and how to sample it again, so the spent budget is not lost.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsynth.data.dataset import ARRAY_FIELDS, DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivsynthError

__all__ = ["check_filters_can_keep", "keep_finetuned", "PROBE_ROWS"]

PROBE_ROWS = 256  # rows of each public source tried; a few hundred cost well under a second of simulation


def check_filters_can_keep(
    environment: DatasetInfo, steps: Any, public: Sequence[OfflineDataset], pretrained: Any = None,
    *, rows: int = PROBE_ROWS,
) -> None:
    """Refuse a post-processing request whose filtering steps keep no row of any public source in ``environment``
    (the sensitive set's public facts): ``rows`` rows spread over each public dataset and ``rows`` samples of the
    ``pretrained`` synthesizer (public weights, before any fine-tune). Never reads sensitive rows. A request without a
    filtering step, or with no public source, passes; so does any source keeping one row (the fine-tuned model may
    keep more: only "nothing at all" is refused)."""
    from privsynth.release.postprocess import postprocess, step_options
    from privsynth.release.support import prepare_release

    options = step_options(steps)
    if not (options["drop_in_walls"] or options["drop_goals_in_walls"] or options["drop_terminated_starts"]):
        return
    sources: list[tuple[str, OfflineDataset]] = [
        (f"public '{p.info.name}'", _spread(p, rows)) for p in public if p.n_transitions]
    if pretrained is not None:
        sample = pretrained.sample(rows, seed=getattr(pretrained.config, "seed", 0), progress=False)
        sources.append(("the pre-trained model's samples", prepare_release(sample, environment)))
    if not sources:
        return
    seen = 0
    for _, data in sources:
        seen += data.n_transitions
        try:
            if postprocess(data, environment=environment, **options)[1]["rows_kept"]:
                return
        except InvalidData:  # every row dropped
            continue
    names = ", ".join(s for s, _ in sources)
    raise InvalidData(
        f"post-processing '{_steps_text(steps)}' keeps none of {seen} public rows ({names}) in "
        f"'{environment.env_id}', so it would refuse the release only after the DP fine-tune spent the budget: drop "
        "the filtering steps (walls, goals), or fine-tune first (privsynth finetune) and post-process when sampling "
        "(privsynth sample --postprocess)")


def keep_finetuned(
    exc: BaseException, synth: Any, saved: Path | None, *, epsilon: float, delta: float, n: int, name: str,
    steps: Any,
) -> PrivsynthError:
    """The error to raise when sampling or post-processing failed after a DP fine-tune: ``exc``'s message, where the
    fine-tuned model is (``saved``, a work directory's stage file, or a new file in the current directory written
    through the release guard) and the command that samples it again."""
    if saved is None:
        from privsynth.privacy.guard import guarded_save_model

        saved = _free_path(Path.cwd() / f"{_slug(name)}.finetuned.pt")
        try:
            guarded_save_model(synth, saved, epsilon, delta)
        except Exception as save_exc:  # noqa: BLE001 - report both failures in one line
            return PrivsynthError(f"{_first_line(exc)}; saving the fine-tuned model to {saved} failed too "
                                  f"({_first_line(save_exc)})")
    post = f" --postprocess {_steps_text(steps)}" if steps else ""
    cls = type(exc) if isinstance(exc, PrivsynthError) else PrivsynthError
    return cls(f"{_first_line(exc)}. The DP fine-tuned model is saved at {saved} (its budget is spent; sampling it "
               f"again costs nothing): privsynth sample --model {saved} -n {n} --out-dataset ID{post} "
               "(or without --postprocess, or with --no-topup)")


def _spread(ds: OfflineDataset, rows: int) -> OfflineDataset:
    """About ``rows`` rows spread evenly over ``ds`` (all of them when it has fewer)."""
    if ds.n_transitions <= rows:
        return ds
    idx = np.unique(np.linspace(0, ds.n_transitions - 1, rows).astype(np.int64))
    return OfflineDataset(**{a: getattr(ds, a)[idx] for a in ARRAY_FIELDS}, info=ds.info)


def _steps_text(steps: Any) -> str:
    if steps is True:
        return "all"
    return steps if isinstance(steps, str) else ",".join(steps)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "release"


def _free_path(path: Path) -> Path:
    """``path``, or ``path`` with ``-2``, ``-3``, ... before its suffix when taken (never overwrite a file)."""
    k = 2
    out = path
    while out.exists():
        out = path.with_name(f"{path.stem}-{k}{path.suffix}")
        k += 1
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].rstrip(".")
