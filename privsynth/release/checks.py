"""Cheap checks that run before any sensitive data is touched, and one-line errors for damaged files
(docs/DESIGN.md invariant 5)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError, PrivsynthError, SpaceMismatch, naming_file
from privsynth.synth.transition import TransitionSynthesizer

__all__ = ["as_dataset", "check_release_request", "check_public", "check_model_fits", "check_pretrained_public",
           "record_dp_request", "load_synthesizer", "check_resume_files"]

def as_dataset(ds: OfflineDataset | str) -> OfflineDataset:
    """A dataset object from an object or a Minari dataset id."""
    if isinstance(ds, OfflineDataset):
        return ds
    from privsynth.data.minari_io import load_dataset

    return load_dataset(str(ds))


def check_release_request(
    out_dataset: str | None,
    *,
    overwrite: bool = False,
    n: int | None = None,
    sensitive_id: str | None = None,
    public_ids: Sequence[str] = (),
) -> None:
    """Cheap checks that must pass before any sensitive data is touched (raise one-line errors).

    The output id is well formed and free (unless ``overwrite``), ``n`` is positive, and no public id names the
    sensitive dataset.
    """
    from privsynth.data import minari_io

    if n is not None and n < 1:
        raise InvalidData(f"-n must be at least 1 (got {n})")
    if out_dataset is not None:
        full = minari_io.resolve_id(out_dataset, for_write=True)
        if minari_io.target_path(full).exists() and not overwrite:
            raise PrivsynthError(f"dataset '{full}' already exists; pass --overwrite to replace it")
    if sensitive_id is not None:
        sens_full = minari_io.resolve_id(sensitive_id)
        for pid in public_ids:
            if minari_io.resolve_id(pid) == sens_full:
                raise InvalidData(f"dataset '{sens_full}' cannot be both public and sensitive (the public data "
                                  "shares every record with the sensitive set)")


def check_public(public: OfflineDataset, sensitive: OfflineDataset) -> None:
    """Refuse public data that is sensitive, has other spaces, or shares any transition with ``sensitive``
    (:meth:`OfflineDataset.check_public_for`)."""
    public.check_public_for(sensitive)


def check_model_fits(synth: Any, sensitive: OfflineDataset) -> None:
    """Raise :class:`SpaceMismatch` when a loaded synthesizer was built for other observation/action widths."""
    dims = (getattr(synth, "obs_dim", None), getattr(synth, "act_dim", None))
    if None not in dims and dims != (sensitive.obs_dim, sensitive.act_dim):
        raise SpaceMismatch(
            f"the synthesizer models obs/action dims {dims[0]}/{dims[1]} but '{sensitive.info.name}' has "
            f"{sensitive.obs_dim}/{sensitive.act_dim}"
        )


def check_pretrained_public(synth: Any, sensitive: OfflineDataset, card: dict[str, Any] | None = None) -> None:
    """Refuse a pre-trained synthesizer whose public data is, or holds records of, the sensitive set, before it is
    fine-tuned on it (pre-training is not accounted, so those records would leave unprotected).

    By id: a public dataset the checkpoint (``synth.public_data``) or its ``card`` (``public_data[].name``) names is
    the sensitive dataset (its name or Minari id) or the dataset it was split from. By content: a card entry that
    records how its data was generated (``generator`` and ``config``, as the shipped models' ``card.json`` do) with the
    same generator and, on every setting the card records, the same values as the sensitive set's root
    (:func:`privsynth.data.provenance.check_public_specs`, the benchmark's check). Reads descriptions, never rows."""
    from privsynth.data.provenance import check_public_specs, data_origin, info_specs

    info = sensitive.info
    specs = info_specs(info.name, info.extra)
    ours = set(specs) | ({info.extra["minari_id"]} if isinstance(info.extra.get("minari_id"), str) else set())
    entries = [e for e in ((card or {}).get("public_data") or []) if isinstance(e, dict)]
    names = [str(n) for n in getattr(synth, "public_data", []) or []] + [str(e.get("name")) for e in entries]
    for name in names:
        if name in ours:
            raise PrivacyError(f"refusing the pre-trained model: it was pre-trained on '{name}', which is the sensitive "
                               f"dataset '{info.name}' or its source; public data must not contain sensitive records")
    root, spec = data_origin(info.name, specs)
    for entry in entries:
        recorded = entry.get("config")
        if not isinstance(entry.get("generator"), str) or not isinstance(recorded, dict) or not recorded:
            continue  # the card does not say how this data was made: the names above are all there is to compare
        config = spec.get("config") if isinstance(spec.get("config"), dict) else {}
        mine = {**specs, root: {"generator": spec.get("generator"), "config": {k: config.get(k) for k in recorded}}}
        key = f"{entry.get('name')} (pre-training data)"
        try:
            check_public_specs([key], info.name, {**mine, key: {"generator": entry["generator"], "config": recorded}})
        except PrivacyError as exc:
            raise PrivacyError(f"refusing the pre-trained model: {exc}") from None


def record_dp_request(config: Any, epsilon: float, delta: float, unit: str) -> None:
    """Write the run's (ε, δ, unit) into ``config.dp``, so the config on the card is the one that ran."""
    dp = getattr(config, "dp", None)
    if dp is not None:
        dp.epsilon, dp.delta, dp.unit = float(epsilon), float(delta), unit


def load_synthesizer(path: str | Path) -> TransitionSynthesizer:
    """:meth:`TransitionSynthesizer.load` with one clear error naming a corrupted or truncated file."""
    try:
        return TransitionSynthesizer.load(path)
    except PrivacyError:
        raise
    except PrivsynthError as exc:  # a check inside the checkpoint reader, which does not know the file's name
        named = naming_file(exc, path)
        if named is exc:
            raise
        raise named from None
    except Exception as exc:  # noqa: BLE001 - torch/pickle raise many types for a damaged file
        raise InvalidData(
            f"cannot read checkpoint {path}: corrupted or truncated ({type(exc).__name__}); delete it or rerun "
            "with --overwrite"
        ) from None


def check_resume_files(paths: Sequence[Path], *, overwrite: bool, log: Any = print) -> None:
    """Refuse (or, with ``overwrite``, delete) resume files that do not load; say which resume files will be used."""
    from privsynth.synth.checkpoint import load_weights_only

    for path in paths:
        if not path.exists():
            continue
        try:
            load_weights_only(path)  # read as data: a file holding pickled objects is refused, never run
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported the same way
            if not overwrite:
                raise InvalidData(
                    f"cannot read resume file {path}: corrupted or truncated ({type(exc).__name__}); delete it or "
                    "rerun with --overwrite"
                ) from None
            path.unlink()
            log(f"discarded unreadable resume file {path}")
