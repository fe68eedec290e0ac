"""The proof store's key covers the fused ops' contract (contracts/fused_ops.py) and every module
of the proof package: a verdict proved by one contract or one proof is never read back under
another."""

from __future__ import annotations

import shutil
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


def test_the_key_changes_when_any_module_of_the_proof_changes(tmp_path: Path) -> None:
    package = Path(store.__file__).resolve().parent
    copy = tmp_path / "proof"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    key = store._digest.__wrapped__(copy)
    assert key == store._digest.__wrapped__(package)
    for module in sorted(copy.glob("*.py")):
        text = module.read_bytes()
        module.write_bytes(text + b"\n")
        assert store._digest.__wrapped__(copy) != key, module.name
        module.write_bytes(text)
    (copy / "added.py").write_text("")
    assert store._digest.__wrapped__(copy) != key  # a new module counts too
