"""Proofs kept between runs: a verdict depends only on the structure, the relations of the
constants and the proof's own code, so it is stored on disk under a digest of that code.

The store is a pickle of {key: verdict} in `$ASCEND_LOWERING_PROOF_CACHE` (default
`~/.cache/ascend-lowering/proofs`), one file per code digest; `ASCEND_LOWERING_PROOF_CACHE=off`
turns it off. It is written whole to a temporary file and renamed, so a run that stops midway or
two runs at once leave either the old file or a complete new one. A file that cannot be read is
ignored (and replaced), never trusted in part.
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


def _path() -> Path | None:
    where = os.environ.get(_ENV, "")
    if where.lower() == "off":
        return None
    root = Path(where) if where else Path.home() / ".cache" / "ascend-lowering" / "proofs"
    return root / f"proofs-{_digest()}.pickle"


def load() -> dict[tuple, Any]:
    path = _path()
    if path is None or not path.is_file():
        return {}
    try:
        with path.open("rb") as f:
            found = pickle.load(f)
    except Exception:  # a damaged or foreign file is no evidence of anything
        return {}
    return found if isinstance(found, dict) else {}


def save(verdicts: dict[tuple, Any]) -> None:
    """Writes the verdicts (merged with what another run stored meanwhile); a store that cannot
    be written is skipped: the proofs are redone next time."""
    path = _path()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**load(), **verdicts}
        if len(merged) > _KEEP:
            merged = dict(list(merged.items())[-_KEEP:])
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".proofs-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(merged, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        return
