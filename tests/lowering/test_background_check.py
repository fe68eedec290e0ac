"""The ONNX checker in a child process beside the pass (lowering.loading.BackgroundCheck): same
result as checking first, the checker's verdict before any output, no hang on graphs that are
not DAGs, and a fallback to checking in-process when the child cannot run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from pass_forms import PGD, SL1, pgd, sl1
from pass_numerics import fused_nodes

import lowering
from app.cli import main
from lowering import loading
from lowering.api import fuse_loaded
from lowering.rewrite import fuse_proto


@pytest.fixture
def background(monkeypatch):
    """Every model is big enough, and the machine has a second core."""
    monkeypatch.setattr(loading, "BACKGROUND_CHECK_BYTES", 0)
    monkeypatch.setattr(loading, "usable_cpus", lambda: 2)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _unknown_op(tmp_path: Path) -> Path:
    """Rejected by the checker for a reason the pass itself never notices."""
    model = sl1()
    model.graph.node[0].op_type = "NoSuchOp"
    return _save(model, tmp_path / "unknown_op.onnx")


def _cycle(tmp_path: Path) -> Path:
    """Two nodes that read each other's output: a walk over producers would never end."""
    x = h.make_tensor_value_info("x", T.FLOAT, [4])
    y = h.make_tensor_value_info("y", T.FLOAT, [4])
    nodes = [h.make_node("Not", ["b"], ["a"]), h.make_node("Not", ["a"], ["b"]),
             h.make_node("Where", ["a", "x", "x"], ["y"])]
    model = h.make_model(h.make_graph(nodes, "cycle", [x], [y]), opset_imports=[h.make_opsetid("", 18)])
    return _save(model, tmp_path / "cycle.onnx")


def _defined_twice(tmp_path: Path) -> Path:
    """Identity(x) -> a; Identity(a) -> x: x is a graph input and defined again, which would
    send normalization's alias chain round in a circle."""
    x = h.make_tensor_value_info("x", T.FLOAT, [4])
    y = h.make_tensor_value_info("y", T.FLOAT, [4])
    nodes = [h.make_node("Identity", ["x"], ["a"]), h.make_node("Identity", ["a"], ["x"]),
             h.make_node("Abs", ["x"], ["y"])]
    model = h.make_model(h.make_graph(nodes, "twice", [x], [y]), opset_imports=[h.make_opsetid("", 18)])
    return _save(model, tmp_path / "twice.onnx")


@pytest.mark.parametrize("make", [lambda: sl1(reduction="mean"), lambda: pgd(scalars="raw")])
def test_background_check_gives_the_same_fused_model(tmp_path: Path, background, make) -> None:
    path = _save(make(), tmp_path / "m.onnx")
    loaded = loading.load(path, background=True)
    assert loaded.pending is not None
    fused, report = fuse_loaded(loaded)
    assert loaded.pending is None
    inline, inline_report = fuse_proto(loading.load(path).model)
    assert fused.SerializeToString() == inline.SerializeToString()
    assert report.to_dict() == inline_report.to_dict()
    assert [n.op_type for n in fused_nodes(fused)] in ([SL1], [PGD])


def test_small_models_are_checked_in_process(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(loading, "usable_cpus", lambda: 2)
    assert loading.load(_save(sl1(), tmp_path / "m.onnx"), background=True).pending is None


def test_one_core_checks_in_process(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(loading, "BACKGROUND_CHECK_BYTES", 0)
    monkeypatch.setattr(loading, "usable_cpus", lambda: 1)
    assert loading.load(_save(sl1(), tmp_path / "m.onnx"), background=True).pending is None


@pytest.mark.parametrize("make", [_unknown_op, _cycle, _defined_twice])
def test_rejected_model_gives_the_checkers_line(tmp_path: Path, background, make) -> None:
    loaded = loading.load(make(tmp_path), background=True)
    assert loaded.pending is not None  # loaded before the verdict
    with pytest.raises(lowering.LoweringError, match="the ONNX checker rejects the model: .+"):
        fuse_loaded(loaded)


@pytest.mark.parametrize("make", [_unknown_op, _cycle])
def test_cli_writes_nothing_for_a_model_the_background_checker_rejects(tmp_path: Path, background, capsys,
                                                                       make) -> None:
    path = make(tmp_path)
    code = main([str(path), "--target", "ascend950", "-o", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the ONNX checker rejects the model" in lines[0] and path.name in lines[0], err
    assert not (tmp_path / "out").exists()


def test_api_fuse_checks_in_background_too(tmp_path: Path, background) -> None:
    with pytest.raises(lowering.LoweringError, match="the ONNX checker rejects the model"):
        lowering.fuse(_unknown_op(tmp_path))
    fused, report = lowering.fuse(_save(sl1(), tmp_path / "ok.onnx"))
    assert [f.op_type for f in report.fusions] == [SL1]
    onnx.checker.check_model(fused, full_check=True)


@pytest.mark.parametrize("executable", ["/bin/false", "/no/such/python"])
def test_child_that_cannot_run_falls_back_to_checking_here(tmp_path: Path, background, monkeypatch, executable) -> None:
    monkeypatch.setattr(sys, "executable", executable)
    fused, report = fuse_loaded(loading.load(_save(sl1(), tmp_path / "ok.onnx"), background=True))
    assert [f.op_type for f in report.fusions] == [SL1]
    with pytest.raises(lowering.LoweringError, match="the ONNX checker rejects the model"):
        fuse_loaded(loading.load(_unknown_op(tmp_path), background=True))


def test_interrupted_run_stops_the_child(tmp_path: Path, background, monkeypatch) -> None:
    loaded = loading.load(_save(sl1(), tmp_path / "m.onnx"), background=True)
    child = loaded.pending._proc

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("lowering.api.fuse_proto", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fuse_loaded(loaded)
    assert loaded.pending is None and child.returncode is not None


def test_report_of_a_background_checked_run(tmp_path: Path, background, capsys) -> None:
    path = _save(sl1(), tmp_path / "loss.onnx")
    code = main([str(path), "--target", "ascend950", "-o", str(tmp_path / "out"), "--emit", "onnx"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "report.json").read_text())["counts"] == {SL1: 1}
