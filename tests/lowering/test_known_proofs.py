"""The shipped proofs (lowering/proof/known_proofs.pickle): made by this code, read only when they
are, and a fusion that reads them is the fusion that proves afresh."""

from __future__ import annotations

import pickle
from pathlib import Path

import onnx
import pytest

import lowering
from lowering.proof import prove, store

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "exporters"


def test_the_shipped_proofs_are_this_codes() -> None:
    with store.SHIPPED.open("rb") as f:
        shipped = pickle.load(f)
    assert shipped["digest"] == store._digest(), (
        "lowering/proof or the contracts changed since the shipped proofs were made: "
        "run python models/make_known_proofs.py")
    verdicts = shipped["verdicts"]
    assert verdicts and all(len(key) == 4 for key in verdicts)  # families only, never one instance
    assert any(v.holds for v in verdicts.values())


def test_stale_shipped_proofs_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", str(tmp_path / "store"))
    assert store.shipped()
    stale = tmp_path / "known_proofs.pickle"
    with store.SHIPPED.open("rb") as f:
        shipped = pickle.load(f)
    stale.write_bytes(pickle.dumps({**shipped, "digest": "0" * 16}))
    monkeypatch.setattr(store, "SHIPPED", stale)
    store._read_shipped.cache_clear()
    try:
        assert store.shipped() == {}
    finally:
        store._read_shipped.cache_clear()


def test_off_reads_no_shipped_proofs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", "off")
    assert store.shipped() == {} and store.load() == {}


def _fusions(path: Path) -> list:
    _, report = lowering.fuse(onnx.load(str(path)))
    return [[f.op_type, f.output, sorted(f.attributes.items()), f.caveats] for f in report.fusions]


@pytest.fixture
def fresh_process_cache():
    """No proof of this process's earlier tests; the stores read again at the first proof (as
    before the test, for the tests after it)."""
    prove.clear_cache()
    prove._stored["loaded"] = False
    yield
    prove.clear_cache()
    prove._stored["loaded"] = False


def test_a_fixture_fuses_alike_from_shipped_proofs_with_fewer_solver_calls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_process_cache: None) -> None:
    models = sorted(SAMPLE.glob("*.onnx"))[:12]
    decide = prove._decide
    asked: list[str] = []

    def counted(*args, **kwargs):
        asked.append(args[1].output)
        return decide(*args, **kwargs)

    monkeypatch.setattr(prove, "_decide", counted)
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", "off")
    afresh = {p.name: _fusions(p) for p in models}
    asked_afresh = len(asked)
    assert any(afresh.values()) and asked_afresh
    prove.clear_cache()
    prove._stored["loaded"] = False
    asked.clear()
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", str(tmp_path / "store"))
    assert {p.name: _fusions(p) for p in models} == afresh
    # what is left for the solver: instances whose family proof does not hold (proved one by one)
    assert len(asked) < asked_afresh / 2, (len(asked), asked_afresh)
