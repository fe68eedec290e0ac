"""Work in forked children (lowering.beside, lowering.proof.beside) gives what the pass gives in
line: the same fused model and report when every form match holds, when one is refused (the graph
is passed again in line), when the recogniser's child finds matches ahead of this process's, and
when a child fails; every child is reaped, and the fuse() API never forks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import pytest

import lowering
from lowering import beside, rewrite
from lowering.patterns import meaning
from lowering.proof import prove
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


def _copies(model: onnx.ModelProto, k: int) -> onnx.ModelProto:
    """`k` copies of a model's graph side by side in one graph: k times its fusions, by meaning too."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:], out.graph.input[:], out.graph.output[:], out.graph.initializer[:], out.graph.value_info[:]
    for i in range(k):
        g = onnx.compose.add_prefix(model, f"copy{i}_").graph
        out.graph.node.extend(g.node)
        out.graph.input.extend(g.input)
        out.graph.output.extend(g.output)
        out.graph.initializer.extend(g.initializer)
        out.graph.value_info.extend(g.value_info)
    return out


MEANING = _copies(onnx.load(str(REPO / "tests/fixtures/jax/mixed_scale_step_mean_b05_f32.onnx")), 3)
MODELS = {"benchmark graph": _benchmark_graph(), "three copies with fusions by meaning": MEANING,
          **{p.parent.name + "/" + p.name: onnx.load(str(p)) for p in FIXTURES}}


def _result(model: onnx.ModelProto, forked: bool) -> tuple[bytes, str]:
    fused, report = fuse_proto(model, beside=forked)
    return fused.SerializeToString(deterministic=True), report.to_json()


def _any_graph_may_fork(monkeypatch: pytest.MonkeyPatch, cpus: int) -> None:
    """Children for every graph, whatever its size, on a machine of `cpus` cores."""
    monkeypatch.setattr(rewrite, "BESIDE_MIN_NODES", 0)
    monkeypatch.setattr(meaning, "MIN_SHARED", 0)
    monkeypatch.setattr(beside, "usable_cpus", lambda: cpus)


def _forbid_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every graph gets a child (whatever its size or the machine's cores); the children's pids."""
    _any_graph_may_fork(monkeypatch, cpus=2)
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
    real = rewrite.prove_match

    def proving(*args: object, **kwargs: object) -> prove.Verdict:
        return then(*args, **kwargs) if os.getpid() != parent else real(*args, **kwargs)  # type: ignore[arg-type]
    return proving


def _counted_passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per pass over a graph (lowering.rewrite._fuse_proto) from now on."""
    passes: list[bool] = []
    real_pass = rewrite._fuse_proto

    def counting(*args: object, **kwargs: object) -> object:
        passes.append(True)
        return real_pass(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rewrite, "_fuse_proto", counting)
    return passes


def test_a_match_the_child_refuses_sends_the_graph_through_again_in_line(forks: list[int],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS["benchmark graph"]
    expected = _result(model, False)
    refused = prove.Verdict(False, "refused in the child")
    monkeypatch.setattr(rewrite, "prove_match", _in_the_child(os.getpid(), lambda *a, **k: refused))
    passes = _counted_passes(monkeypatch)
    assert _result(model, True) == expected
    assert len(passes) == 2  # the graph's pass, then again with its proofs in line


@pytest.mark.parametrize("name", list(MODELS))
def test_a_child_that_dies_leaves_the_proofs_to_this_process(name: str, forks: list[int],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent proves the matches as a proof in line would (each with the earlier matches'
    nodes taken), so they hold as they do in line: one pass, the same result."""
    model = MODELS[name]
    expected = _result(model, False)

    def die(*args: object, **kwargs: object) -> prove.Verdict:
        os._exit(1)

    monkeypatch.setattr(rewrite, "prove_match", _in_the_child(os.getpid(), die))
    passes = _counted_passes(monkeypatch)
    assert _result(model, True) == expected
    assert len(passes) == _graphs(model)


def _graphs(model: onnx.ModelProto) -> int:
    """How many graphs the pass runs on: the main graph and every If/Loop/Scan body."""
    def count(graph: onnx.GraphProto) -> int:
        return 1 + sum(count(a.g) + sum(count(g) for g in a.graphs) for n in graph.node for a in n.attribute
                       if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS))
    return count(model.graph)


def test_a_stop_while_a_batch_is_on_its_way_ends_quietly(capfd: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A child stopped before its results (an error or Ctrl-C in the pass) is reaped, and its
    feeder ends without a traceback, even with a send under way."""
    monkeypatch.setattr(beside, "usable_cpus", lambda: 2)
    child = beside.Beside.start(lambda item: item)
    assert child is not None
    for _ in range(20_000):
        child.submit(bytes(1024))
    child.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_a_claim_whose_lock_stays_held_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child killed while it holds the claims' lock leaves the rest to the caller, no hang."""
    monkeypatch.setattr(beside, "_CLAIM_WAIT_S", 0.05)
    claims = beside.Claims(10)
    assert claims.claim() == 0
    claims._lock.acquire()
    assert claims.claim() is None


def test_without_a_second_core_nothing_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _result(MEANING, False)
    _any_graph_may_fork(monkeypatch, cpus=1)
    _forbid_forks(monkeypatch)
    assert _result(MEANING, True) == expected


def test_an_undecided_proof_is_kept_for_the_run_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal because the solver ran out of time is not stored, shipped or handed back by a
    child: on a less busy machine the solver may decide."""
    monkeypatch.setattr(prove, "_cache", {})
    prove._remember(("decided",), prove.Verdict(True))
    prove._remember(("undecided",), prove.Verdict(False, "did not decide", undecided=True))
    assert set(prove.cached_verdicts()) == {("decided",)}


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
    _, report = fuse_proto(MODELS["benchmark graph"], beside=True)
    assert report.fusions
    assert not asked_here
    assert [k for k, v in prove.cached_verdicts().items() if len(k) == 4 and v.holds]


def test_the_recogniser_shares_its_differences_and_keeps_their_order(forks: list[int]) -> None:
    """Matches by meaning among the differences worked out ahead: each after the first is worked
    out again in line (the outcomes ahead did not know the nodes it took), with the same result."""
    try:
        beside.Claims(1)
    except (OSError, ImportError):
        pytest.skip("no shared memory for the claims' counter here: the recogniser works alone")
    fused, report = fuse_proto(MEANING, beside=True)
    assert sum(f.pattern.endswith("/meaning") for f in report.fusions) == 3
    assert len(forks) == 2  # the form matches' prover and the recogniser's helper
    assert _result(MEANING, True) == _result(MEANING, False)


def test_the_api_never_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    _any_graph_may_fork(monkeypatch, cpus=2)
    _forbid_forks(monkeypatch)
    _, report = lowering.fuse(MODELS["benchmark graph"])
    assert report.fusions
