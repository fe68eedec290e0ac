"""The proof store is written whole or not at all: a write that fails keeps the old file and
leaves no temporary file in the user's cache."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from lowering.proof import store


def test_a_failed_write_keeps_the_old_store_and_leaves_nothing_behind(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", str(tmp_path))
    store.save({("a",): 1})
    path = store._path()
    assert path is not None and store._read(path) == {("a",): 1}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pickle, "dump", full_disk)
    store.save({("b",): 2})  # a store that cannot be written is skipped, never an error
    monkeypatch.undo()
    assert store._read(path) == {("a",): 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
