"""Proofs kept between runs: a verdict depends only on the structure, the relations of the
constants and the proof's own code, so it is stored on disk under a digest of that code.

Two stores, both pickles of {key: verdict} for one code digest:
  * the shipped proofs (`known_proofs.pickle` beside this module): the families of the exporter
    spellings in this repository's fixtures, proved by `models/make_known_proofs.py`. They are
    read only when their digest is this code's: a changed proof makes them stale (a test says
    so), never wrong;
  * the user's store in `$ASCEND_LOWERING_PROOF_CACHE` (default `~/.cache/ascend-lowering/proofs`),
    one file per code digest, with the proofs of every run since. It is written whole to a
    temporary file and renamed, so a run that stops midway or two runs at once leave either the
    old file or a complete new one. A file that cannot be read is ignored (and replaced), never
    trusted in part.
`ASCEND_LOWERING_PROOF_CACHE=off` turns both off: every proof is made in the run that needs it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from contracts import fused_ops

_ENV = "ASCEND_LOWERING_PROOF_CACHE"
_KEEP = 20000  # proofs kept on disk, the newest
SHIPPED = Path(__file__).resolve().parent / "known_proofs.pickle"


@functools.cache
def _digest(package: Path | None = None) -> str:
    """The proof's code: every module of this package (a verdict may depend on any of them, and
    one added later is covered without a list to update), and the contracts."""
    h = hashlib.sha256()
    for module in sorted((package or Path(__file__).resolve().parent).glob("*.py")):
        h.update(module.name.encode())
        h.update(module.read_bytes())
    h.update(Path(fused_ops.__file__).read_bytes())
    return h.hexdigest()[:16]


def _off() -> bool:
    return os.environ.get(_ENV, "").lower() == "off"


def _path() -> Path | None:
    if _off():
        return None
    where = os.environ.get(_ENV, "")
    root = Path(where) if where else Path.home() / ".cache" / "ascend-lowering" / "proofs"
    return root / f"proofs-{_digest()}.pickle"


def load() -> dict[tuple, Any]:
    """The shipped proofs, then the user's (a key in both: the user's)."""
    return {**shipped(), **_read(_path())}


def _read(path: Path | None) -> dict[tuple, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        with path.open("rb") as f:
            found = pickle.load(f)
    except Exception:  # a damaged or foreign file is no evidence of anything
        return {}
    return found if isinstance(found, dict) else {}


def shipped() -> dict[tuple, Any]:
    """The shipped proofs, when they were made by this code (else none)."""
    if _off():
        return {}
    found = _read_shipped()
    return found["verdicts"] if found is not None and found["digest"] == _digest() else {}


@functools.cache
def _read_shipped() -> dict[str, Any] | None:
    found: dict[Any, Any] = _read(SHIPPED)
    return found if isinstance(found.get("digest"), str) and isinstance(found.get("verdicts"), dict) else None


def write_shipped(verdicts: dict[tuple, Any]) -> None:
    """Replaces the shipped proofs with `verdicts`, under this code's digest (in key order, so
    the same proofs give the same file)."""
    ordered = dict(sorted(verdicts.items(), key=lambda item: repr(item[0])))
    _write_whole(SHIPPED, {"digest": _digest(), "verdicts": ordered}, mode=0o644)  # package data, read by every user
    _read_shipped.cache_clear()


def save(verdicts: dict[tuple, Any]) -> None:
    """Writes the verdicts the shipped proofs do not hold (merged with what another run stored
    meanwhile); a store that cannot be written is skipped: the proofs are redone next time."""
    path = _path()
    if path is None:
        return
    known = shipped()
    verdicts = {k: v for k, v in verdicts.items() if k not in known}
    if not verdicts:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**_read(path), **verdicts}
        if len(merged) > _KEEP:
            merged = dict(list(merged.items())[-_KEEP:])
        _write_whole(path, merged)
    except OSError:
        return


def _write_whole(path: Path, content: object, mode: int | None = None) -> None:
    """Pickles `content` to a temporary file beside `path` and renames it over `path`: a reader
    sees the old file or the whole new one; a write that fails leaves no temporary file behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(content, f, protocol=pickle.HIGHEST_PROTOCOL)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
