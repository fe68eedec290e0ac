"""Proofs in a forked child (lowering.proof.beside) give what proofs in line give: the same fused
model and report when every match holds, when one is refused (the graph is passed again in line),
and when the child fails; the child is always reaped, and the fuse() API never forks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import pytest

import lowering
from lowering.proof import beside, prove
from lowering.rewrite import fuse_proto

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted(REPO.glob("tests/fixtures/*/*.onnx"))[::24]


def _benchmark_graph() -> onnx.ModelProto:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import pass_speed
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    model, _ = pass_speed.build_graph(3000, seed=1)
    return model


MODELS = {"benchmark graph": _benchmark_graph(), **{p.parent.name + "/" + p.name: onnx.load(str(p)) for p in FIXTURES}}


def _result(model: onnx.ModelProto, prove_beside: bool) -> tuple[bytes, str]:
    fused, report = fuse_proto(model, prove_beside=prove_beside)
    return fused.SerializeToString(deterministic=True), report.to_json()


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every graph gets a child (whatever its size or the machine's cores); the children's pids."""
    monkeypatch.setattr(beside, "MIN_NODES", 0)
    monkeypatch.setattr(beside, "usable_cpus", lambda: 2)
    pids: list[int] = []
    fork = os.fork

    def recording_fork() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recording_fork)
    yield pids
    for pid in pids:  # each was reaped by the pass
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("name", list(MODELS))
def test_proofs_beside_give_the_result_of_proofs_in_line(name: str, forks: list[int]) -> None:
    model = MODELS[name]
    assert _result(model, True) == _result(model, False)
    assert forks


def _in_the_child(parent: int, then: Callable[..., prove.Verdict]) -> Callable[..., prove.Verdict]:
    real = prove.prove

    def proving(*args: object, **kwargs: object) -> prove.Verdict:
        return then(*args, **kwargs) if os.getpid() != parent else real(*args, **kwargs)  # type: ignore[arg-type]
    return proving


def test_a_match_the_child_refuses_sends_the_graph_through_again_in_line(forks: list[int],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS["benchmark graph"]
    expected = _result(model, False)
    refused = prove.Verdict(False, "refused in the child")
    monkeypatch.setattr(prove, "prove", _in_the_child(os.getpid(), lambda *a, **k: refused))
    passes: list[bool] = []
    real_pass = lowering.rewrite._fuse_proto

    def counting(*args: object, **kwargs: object) -> object:
        passes.append(True)
        return real_pass(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lowering.rewrite, "_fuse_proto", counting)
    assert _result(model, True) == expected
    assert len(passes) == 2  # the graph's pass, then again with its proofs in line


def test_a_child_that_dies_leaves_the_proofs_to_this_process(forks: list[int],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS["benchmark graph"]
    expected = _result(model, False)

    def die(*args: object, **kwargs: object) -> prove.Verdict:
        os._exit(1)

    monkeypatch.setattr(prove, "prove", _in_the_child(os.getpid(), die))
    assert _result(model, True) == expected


@pytest.fixture
def nothing_proved(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No proof in this process, none on disk; the stores read again afterwards (as before the
    test, for the tests after it)."""
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", "off")
    prove.clear_cache()
    prove._stored["loaded"] = False
    yield
    prove.clear_cache()
    prove._stored["loaded"] = False


def test_the_child_brings_back_the_proofs_it_made(forks: list[int], nothing_proved: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Families the child proved are in this process's cache afterwards (so the proof store keeps
    them), and this process asked the solver nothing."""
    parent = os.getpid()
    asked_here: list[bool] = []
    decide = prove._decide

    def counted(*args: object, **kwargs: object) -> prove.Verdict:
        if os.getpid() == parent:
            asked_here.append(True)
        return decide(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(prove, "_decide", counted)
    _, report = fuse_proto(MODELS["benchmark graph"], prove_beside=True)
    assert report.fusions
    assert not asked_here
    assert [k for k, v in prove.cached_verdicts().items() if len(k) == 4 and v.holds]


def test_the_api_never_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beside, "MIN_NODES", 0)
    monkeypatch.setattr(beside, "usable_cpus", lambda: 2)

    def no_fork() -> int:
        raise AssertionError("fuse() forked")

    monkeypatch.setattr(os, "fork", no_fork)
    _, report = lowering.fuse(MODELS["benchmark graph"])
    assert report.fusions
