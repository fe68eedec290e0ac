"""The proof store's key covers the fused ops' contract (contracts/fused_ops.py): a verdict proved
against one contract is never read back under another."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from contracts import fused_ops
from lowering.proof import store


def test_the_key_changes_when_the_contract_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = store._digest.__wrapped__()
    contract = tmp_path / "fused_ops.py"
    contract.write_bytes(Path(fused_ops.__file__).read_bytes())
    monkeypatch.setattr(store, "fused_ops", types.SimpleNamespace(__file__=str(contract)))
    assert store._digest.__wrapped__() == key  # the same bytes, the same key
    text = contract.read_text()
    assert "DOMAIN_VERSION = 1\n" in text
    contract.write_text(text.replace("DOMAIN_VERSION = 1\n", "DOMAIN_VERSION = 2\n"))
    assert store._digest.__wrapped__() != key
