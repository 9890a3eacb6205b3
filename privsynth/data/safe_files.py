"""Reading files made by others as data: array files (``.npz`` archives, HDF5 files) with a size check before any
allocation, and text / JSON files (cards, configs, ledgers, records) with one line for a damaged one.

numpy and h5py allocate the shape an array *declares* before reading its bytes: a ``.npz`` member or an HDF5 dataset
of a few bytes that declares 10^11 rows asks for terabytes (a ``MemoryError`` traceback, or the machine swapping).
The readers here compare each declared size with what the file actually stores (allowing for compression) and
refuse the file in one line (:class:`~privsynth.errors.InvalidData`) before reading; nothing is unpickled
(``allow_pickle=False``: object arrays are refused).
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["load_npz", "check_npz", "check_hdf5_sizes", "read_text", "read_json", "read_json_object"]

# deflate expands at most ~1032x; anything claiming more was not written by numpy (or is a compression bomb)
_MAX_RATIO = 1100
_SLACK = 1 << 20


def _plausible(declared: int, stored: int) -> bool:
    return declared <= _MAX_RATIO * stored + _SLACK


def check_npz(path: str | Path, what: str | None = None) -> None:
    """Raise :class:`InvalidData` unless ``path`` is a zip archive of ``.npy`` arrays whose declared sizes fit what
    the archive holds (no object arrays, nothing larger than its stored bytes allow)."""
    path = Path(path)
    label = what or str(path)
    if not zipfile.is_zipfile(path):
        raise InvalidData(f"cannot read {label} as .npz: not a valid .npz (zip) archive")
    try:
        with zipfile.ZipFile(path) as zf:
            for entry in zf.infolist():
                if not entry.filename.endswith(".npy"):
                    continue
                if entry.compress_type == zipfile.ZIP_STORED and entry.file_size != entry.compress_size:
                    raise InvalidData(f"cannot read {label} as .npz: member {entry.filename} is damaged")
                if not _plausible(entry.file_size, entry.compress_size):
                    raise InvalidData(f"cannot read {label} as .npz: member {entry.filename} declares "
                                      f"{entry.file_size} bytes from {entry.compress_size} stored")
                with zf.open(entry) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                if dtype.hasobject:
                    raise InvalidData(f"cannot read {label} as .npz: {entry.filename} holds Python objects, which "
                                      "are never unpickled")
                declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if declared > entry.file_size:
                    raise InvalidData(f"cannot read {label} as .npz: {entry.filename} declares shape "
                                      f"{tuple(shape)} ({declared} bytes) but holds {entry.file_size} bytes")
    except InvalidData:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as exc:
        raise InvalidData(f"cannot read {label} as .npz: {exc}") from None


def load_npz(path: str | Path, keys: tuple[str, ...] | None = None, what: str | None = None) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file (all, or ``keys``, each required) after :func:`check_npz`; one-line errors."""
    path = Path(path)
    label = what or str(path)
    check_npz(path, what)
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in keys or () if k not in npz.files]
            if missing:
                raise InvalidData(f"cannot read {label}: it lacks the arrays {', '.join(missing)}")
            return {k: npz[k] for k in (keys or npz.files)}
    except InvalidData:
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, MemoryError, NotImplementedError) as exc:
        raise InvalidData(f"cannot read {label} as .npz: {exc}") from None


def check_hdf5_sizes(path: str | Path, what: str | None = None) -> None:
    """Raise :class:`InvalidData` if an HDF5 dataset in ``path`` declares far more bytes than the file stores for it
    (what h5py would allocate on reading), if a link or a virtual dataset reads another file, or if the file cannot
    be opened. Walks the links with h5py's low-level API (about 0.25 ms per Minari episode)."""
    import h5py
    from h5py import h5d, h5l, h5o

    path = Path(path)
    label = what or str(path)
    bad: list[str] = []

    def visit(name: bytes, info: object) -> int | None:
        shown = name.decode(errors="replace")
        if info.type == h5l.TYPE_EXTERNAL:  # type: ignore[attr-defined]
            bad.append(f"{shown} links to another file; a dataset's arrays must be in its own file")
            return 1  # stops the walk
        if info.type != h5l.TYPE_HARD:  # type: ignore[attr-defined]
            return None
        oid = h5o.open(fid, name)
        if not isinstance(oid, h5d.DatasetID):
            return None
        shape = oid.shape or ()
        declared = int(np.prod(shape, dtype=object)) * oid.get_type().get_size()
        stored = oid.get_storage_size()
        if stored == 0 and declared and oid.get_create_plist().get_layout() == h5d.VIRTUAL:
            bad.append(f"{shown} is a virtual dataset reading other files")
            return 1
        if not _plausible(declared, stored):
            bad.append(f"{shown} declares shape {tuple(shape)} ({declared} bytes) but the file stores {stored} "
                       "bytes for it")
            return 1
        return None

    try:
        with h5py.File(path, "r") as f:
            fid = f.id
            fid.links.visit(visit, info=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InvalidData(f"cannot read {label}: {exc}") from None
    if bad:
        raise InvalidData(f"cannot read {label}: {bad[0]}")


def read_text(path: str | Path, what: str | None = None) -> str:
    """A text file's contents; a file that cannot be read or is not UTF-8 is one :class:`InvalidData` line."""
    try:
        return Path(path).read_text()
    except UnicodeDecodeError:
        raise InvalidData(f"cannot read {what or path} (not UTF-8 text)") from None
    except OSError as exc:
        raise InvalidData(f"cannot read {what or path} ({exc.strerror or exc})") from None


def read_json(path: str | Path, what: str | None = None) -> Any:
    """A JSON file's value; unreadable, non-UTF-8, malformed or too deeply nested JSON is one :class:`InvalidData`
    line naming ``what`` (default: the path)."""
    try:
        return json.loads(Path(path).read_text())
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidData(f"cannot read {what or path}: not readable JSON ({type(exc).__name__})") from None
    except OSError as exc:
        raise InvalidData(f"cannot read {what or path} ({exc.strerror or exc})") from None


def read_json_object(path: str | Path, what: str | None = None) -> dict[str, Any]:
    """:func:`read_json` for a file that must hold a JSON object (a mapping)."""
    obj = read_json(path, what)
    if not isinstance(obj, dict):
        raise InvalidData(f"cannot read {what or path}: it must hold a JSON object, not a {type(obj).__name__}")
    return obj
