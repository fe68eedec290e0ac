"""The `lower` command and the Python API: outputs, bad inputs (exit 2, one line), no data loss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir
import pytest
from pass_forms import PGD, SL1, G, pgd, sl1, splice
from pass_numerics import assert_same_outputs, fused_nodes, make_feeds

import lowering
from app.cli import SUMMARY_LIMIT, main
from lowering.report import FusionReport, Rejection


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_lower_writes_fused_model_and_report(tmp_path: Path, capsys, monkeypatch) -> None:
    model_path = _save(sl1(), tmp_path / "loss.onnx")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run([str(model_path), "--target", "ascend950", "--emit", "onnx"], capsys)
    assert code == 0, err
    outdir = tmp_path / "loss.lowered"
    fused = onnx.load(str(outdir / "loss.fused.onnx"))
    assert [n.op_type for n in fused_nodes(fused)] == [SL1]
    report = json.loads((outdir / "report.json").read_text())
    assert report["counts"] == {SL1: 1}
    (fusion,) = report["fusions"]
    assert fusion["op_type"] == SL1 and fusion["attributes"]["sigma"] == 0.5
    assert fusion["replaced_nodes"] and fusion["pattern"].startswith("smooth_l1_grad/")
    assert "fused" in out and SL1 in out
    assert onnx.load(str(model_path)) == sl1()  # the input is untouched


def test_report_lists_rejections_with_anchor_and_reason(tmp_path: Path, capsys) -> None:
    model = sl1(form="where_le", beta=0.0, reduction="sum")
    path = _save(model, tmp_path / "m.onnx")
    code, _, err = _run([str(path), "--target", "ascend910b", "-o", str(tmp_path / "out"), "--emit", "onnx"], capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["fusions"] == []
    (rej,) = report["rejections"]
    assert rej["anchor"] and rej["op_type"] == "Where" and "0 by 0" in rej["reason"]


def _truncated(tmp_path: Path) -> Path:
    data = sl1().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    return path


def _checker_rejects(tmp_path: Path) -> Path:
    model = sl1()
    model.graph.node[0].input[0] = "no_such_value"
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _old_opset(tmp_path: Path) -> Path:
    model = sl1(reduction="sum")
    model.opset_import[0].version = 7
    path = tmp_path / "old.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _not_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\n")
    return path


def _unreadable_constant(tmp_path: Path, data_type: int | None = None) -> Path:
    """A constant the ONNX checker passes but nothing can read: raw data that does not fit its
    dims, or an element type ONNX does not have."""
    model = pgd()
    tensor = model.graph.initializer[0]
    tensor.raw_data = np.zeros(3, np.float32).tobytes()[:6]
    if data_type is not None:
        tensor.data_type = data_type
    return _save(model, tmp_path / "unreadable.onnx")


def _recursive_functions(tmp_path: Path) -> Path:
    """Two model-local functions that call each other in a model of IR version 7, which the checker
    lets through and the pass refuses."""
    model = sl1()
    for name, callee in (("A", "B"), ("B", "A")):
        model.functions.append(onnx.helper.make_function(
            "local", name, ["x"], ["y"], [onnx.helper.make_node(callee, ["x"], ["y"], domain="local")],
            [onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("local", 1)]))
    model.opset_import.append(onnx.helper.make_opsetid("local", 1))
    model.ir_version = 7  # the checker looks at model-local functions from IR version 8 on
    return _save(model, tmp_path / "recursive.onnx")


@pytest.mark.parametrize("make, message", [
    (lambda t: t / "missing.onnx", "no such file"),
    (_unreadable_constant, "cannot be read"),
    (lambda t: _unreadable_constant(t, data_type=99), "cannot be read"),
    (_recursive_functions, "the model is invalid"),
    (lambda t: t, "is a directory"),
    (_not_onnx, "not"),
    (_truncated, "not"),
    (_checker_rejects, "checker rejects"),
    (_old_opset, "too old"),
])
def test_bad_inputs_exit_2_with_one_line(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    result = subprocess.run([sys.executable, "-m", "app.cli", str(path), "--target", "ascend950",
                             "-o", str(tmp_path / "o")], capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_unknown_target_lists_known_ones(tmp_path: Path, capsys) -> None:
    path = _save(sl1(), tmp_path / "m.onnx")
    code, _, err = _run([str(path), "--target", "ascend310p"], capsys)
    assert code == 2
    assert "ascend950" in err and "ascend910b" in err and "ascend910_93" in err


def test_help_explains_outputs(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--target" in text and "report.json" in text and "never modified" in text


def test_foreign_output_dir_is_not_overwritten(tmp_path: Path, capsys) -> None:
    path = _save(sl1(), tmp_path / "m.onnx")
    outdir = tmp_path / "mine"
    outdir.mkdir()
    (outdir / "report.json").write_text("precious")
    code, _, err = _run([str(path), "--target", "ascend950", "-o", str(outdir)], capsys)
    assert code == 2 and "not empty" in err
    assert (outdir / "report.json").read_text() == "precious"
    code, _, _ = _run([str(path), "--target", "ascend950", "-o", str(tmp_path / "again"), "--emit", "onnx"], capsys)
    assert code == 0
    code, _, _ = _run([str(path), "--target", "ascend950", "-o", str(tmp_path / "again"), "--emit", "onnx"], capsys)
    assert code == 0  # its own earlier output may be refreshed


def test_model_folder_is_refused_as_output(tmp_path: Path, capsys) -> None:
    path = _save(sl1(), tmp_path / "m.onnx")
    code, _, err = _run([str(path), "--target", "ascend950", "-o", str(tmp_path)], capsys)
    assert code == 2 and path.exists()


def test_external_data_round_trip(tmp_path: Path, capsys, rng: np.random.Generator) -> None:
    model = pgd(shape=(64, 64))
    weight = onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W")
    model.graph.initializer.append(weight)
    model.graph.node.append(onnx.helper.make_node("Add", ["var", "W"], ["shifted"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("shifted", onnx.TensorProto.FLOAT, [64, 64]))
    src = tmp_path / "src"
    src.mkdir()
    on_disk = onnx.ModelProto()
    on_disk.CopyFrom(model)  # onnx.save rewrites the tensors it externalises
    onnx.save(on_disk, str(src / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    code, _, err = _run([str(src / "m.onnx"), "--target", "ascend950", "-o", str(tmp_path / "out"),
                         "--emit", "onnx"], capsys)
    assert code == 0, err
    out = tmp_path / "out" / "m.fused.onnx"
    assert (tmp_path / "out" / "m.fused.onnx.data").exists()
    fused = onnx.load(str(out))
    assert [n.op_type for n in fused_nodes(fused)] == [PGD]
    feeds = make_feeds(model, rng)
    assert_same_outputs(model, fused, feeds)


def test_external_data_model_verifies_after_it_is_written(tmp_path: Path, capsys) -> None:
    on_disk = pgd(shape=(64, 64))
    on_disk.graph.initializer.append(onnx.numpy_helper.from_array(np.full((64, 64), 0.25, np.float32), "W"))
    on_disk.graph.node.append(onnx.helper.make_node("Add", ["var", "W"], ["shifted"]))
    on_disk.graph.output.append(onnx.helper.make_tensor_value_info("shifted", onnx.TensorProto.FLOAT, [64, 64]))
    onnx.save(on_disk, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    # saving the fused model with external data must not turn the in-memory tensors --verify
    # then runs into references to a file relative to somewhere else
    code, out, err = _run([str(tmp_path / "m.onnx"), "--target", "ascend950", "-o", str(tmp_path / "out"), "--verify"],
                          capsys)
    assert code == 0, err
    assert "PASS" in out


def test_external_data_file_missing_is_a_clear_error(tmp_path: Path, capsys) -> None:
    on_disk = pgd(shape=(64, 64))
    on_disk.graph.initializer.append(onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "W"))
    on_disk.graph.node.append(onnx.helper.make_node("Add", ["var", "W"], ["shifted"]))
    on_disk.graph.output.append(onnx.helper.make_tensor_value_info("shifted", onnx.TensorProto.FLOAT, [64, 64]))
    onnx.save(on_disk, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    (tmp_path / "m.bin").unlink()
    code, _, err = _run([str(tmp_path / "m.onnx"), "--target", "ascend950", "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "m.bin" in err, err


# Models over protobuf's 2 GB cannot be serialized; lowering.loading.serialized_or_none says so with None.
# Real ones take minutes and gigabytes here, so these tests make a small model look that large.


def test_model_over_2gb_in_memory_is_checked_and_fused(monkeypatch) -> None:
    monkeypatch.setattr("lowering.loading.serialized_or_none", lambda model: None)
    fused, report = lowering.fuse(pgd())
    assert [n.op_type for n in fused_nodes(fused)] == [PGD] and len(report.fusions) == 1
    broken = pgd()
    broken.graph.node[0].input.append("nowhere")
    with pytest.raises(lowering.LoweringError, match="the ONNX checker rejects the model") as caught:
        lowering.fuse(broken)
    assert "lowering_check_" not in str(caught.value)  # the temporary copy is not named to the user


def test_model_over_2gb_is_written_with_external_data(tmp_path: Path, capsys, monkeypatch,
                                                      rng: np.random.Generator) -> None:
    model = pgd(shape=(64, 64))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.full((64, 64), 0.5, np.float32), "W"))
    model.graph.node.append(onnx.helper.make_node("Add", ["var", "W"], ["shifted"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("shifted", onnx.TensorProto.FLOAT, [64, 64]))
    model_path = _save(model, tmp_path / "step.onnx")
    monkeypatch.setattr("lowering.loading.serialized_or_none", lambda model: None)
    code, _, err = _run([str(model_path), "--target", "ascend950", "-o", str(tmp_path / "out"),
                         "--emit", "onnx"], capsys)
    assert code == 0, err
    assert (tmp_path / "out" / "step.fused.onnx.data").exists()
    fused = onnx.load(str(tmp_path / "out" / "step.fused.onnx"))
    assert [n.op_type for n in fused_nodes(fused)] == [PGD]
    feeds = make_feeds(model, rng)
    assert_same_outputs(model, fused, feeds)


def test_model_over_2gb_verifies_through_a_file(tmp_path: Path, capsys, monkeypatch) -> None:
    model_path = _save(pgd(), tmp_path / "step.onnx")
    monkeypatch.setattr("runtime.ort_exec.serialized_or_none", lambda model: None)
    code, out, err = _run([str(model_path), "--target", "ascend950", "-o", str(tmp_path / "out"), "--verify"], capsys)
    assert code == 0, err
    assert "PASS" in out


def test_shape_inference_that_cannot_serialize_the_model_leaves_shapes_unknown(monkeypatch) -> None:
    from google.protobuf.message import EncodeError

    def too_large(model, *args, **kwargs):
        raise EncodeError("Failed to serialize proto")

    model = sl1()
    del model.graph.value_info[:]
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", too_large)
    fused, report = lowering.fuse(model)  # no crash: fuses where the graph's own types suffice
    assert len(report.fusions) + len(report.rejections) >= 1


def test_unsafe_model_name_becomes_a_safe_file_name(tmp_path: Path, capsys, monkeypatch) -> None:
    weird = tmp_path / 'a b;$(rm -rf x)".onnx'
    _save(sl1(), weird)
    monkeypatch.chdir(tmp_path)
    code, _, err = _run([str(weird), "--target", "ascend950", "--emit", "onnx"], capsys)
    assert code == 0, err
    (outdir,) = [p for p in tmp_path.iterdir() if p.suffix == ".lowered"]
    assert all(c.isalnum() or c in "._-" for c in outdir.name)


def test_api_accepts_onnx_ir_and_pass_object() -> None:
    model = onnx_ir.serde.deserialize_model(pgd(scalars="raw"))
    fused, report = lowering.fuse(model)
    assert isinstance(fused, onnx_ir.Model) and report.counts() == {PGD: 1}
    result = lowering.FuseAscendPass()(onnx_ir.serde.deserialize_model(sl1()))
    assert result.modified
    assert [n.op_type for n in result.model.graph if n.domain == "com.huawei.ascend"] == [SL1]
    proto = onnx_ir.serde.serialize_model(result.model)
    onnx.checker.check_model(proto)


def test_api_does_not_modify_its_input() -> None:
    model = sl1()
    before = model.SerializeToString()
    lowering.fuse(model)
    assert model.SerializeToString() == before


def test_api_bad_input_raises_lowering_error() -> None:
    with pytest.raises(lowering.LoweringError):
        lowering.fuse(12)


def test_lower_emits_kernels_and_lists_them(tmp_path: Path, capsys) -> None:
    path = _save(pgd(scalars="raw"), tmp_path / "step.onnx")
    outdir = tmp_path / "out"
    code, out, err = _run([str(path), "--target", "ascend910_93", "-o", str(outdir)], capsys)
    assert code == 0, err
    report = json.loads((outdir / "report.json").read_text())
    (kernel,) = report["kernels"]
    assert kernel["op"] == PGD and kernel["target"] == "ascend910_93" and kernel["nodes"]
    assert kernel["vector_instructions_per_tile"] > 0 and kernel["sample"]["block_dim"] > 0
    project = outdir / "kernels" / kernel["kernel"]
    assert (project / "op_kernel").is_dir() and (project / "op_host").is_dir()


def test_emit_ir_prints_and_writes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    path = _save(sl1(), tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run([str(path), "--target", "ascend950", "--emit", "ir"], capsys)
    assert code == 0, err
    assert "kernel SmoothL1LossGradV2 float32" in out and "CopyOut" in out
    assert not (tmp_path / "m.lowered").exists()


def test_verify_and_diff_pass_on_a_lowered_model(tmp_path: Path, capsys) -> None:
    path = _save(sl1(form="huber", beta=0.7), tmp_path / "m.onnx")
    outdir = tmp_path / "out"
    code, out, err = _run([str(path), "--target", "ascend950", "-o", str(outdir), "--verify", "--seed", "7"], capsys)
    assert code == 0, out + err
    assert "PASS" in out
    code, out, err = _run(["diff", str(path), str(outdir / "m.fused.onnx"), "--edge-nonfinite",
                           "--json", str(tmp_path / "diff.json")], capsys)
    assert code == 0, out + err
    assert json.loads((tmp_path / "diff.json").read_text())


def test_terminal_summary_of_a_big_model_is_capped(tmp_path: Path, capsys) -> None:
    """Thousands of fusions would bury the terminal; report.json keeps every one."""
    g = G()
    count = SUMMARY_LIMIT + 5
    for k in range(count):
        g.output(splice(g, sl1(beta=0.5), {}, f"m{k}_")[sl1().graph.output[0].name])
    path = tmp_path / "many.onnx"
    onnx.save(g.model(), str(path))
    code, out, err = _run([str(path), "--target", "ascend950", "-o", str(tmp_path / "out"), "--emit", "onnx"], capsys)
    assert code == 0, err
    assert sum(line.startswith("  fused ") for line in out.splitlines()) == SUMMARY_LIMIT
    assert "  ... and 5 more fusions (all in report.json)" in out
    assert len(json.loads((tmp_path / "out" / "report.json").read_text())["fusions"]) == count


def test_summary_limit_caps_near_misses_too() -> None:
    report = FusionReport(rejections=[Rejection("smooth_l1_grad", f"n{k}", "Where", "why") for k in range(7)])
    lines = report.summary(limit=3).splitlines()
    assert sum(line.startswith("  skipped") for line in lines) == 3
    assert lines[-1] == "  ... and 4 more near-matches (all in report.json)"
    assert "more" not in report.summary()


def test_constant_cast_to_an_unknown_type_is_left_alone() -> None:
    # Cast(to=0) of a constant passes the checker; folding it would need a numpy type ONNX lacks
    model = pgd()
    model.graph.node.append(onnx.helper.make_node("Cast", [model.graph.initializer[0].name], ["odd"], to=0))
    fused, report = lowering.fuse(model)
    assert report.counts() == {PGD: 1}


def test_no_meaning_fuses_only_spelled_out_forms(tmp_path: Path) -> None:
    model = Path(__file__).resolve().parents[1] / "fixtures" / "jax" / "sl1_minimum_sum_b05_f32.onnx"
    for flags, fusions in (([], 1), (["--no-meaning"], 0)):
        out = tmp_path / f"out{len(flags)}"
        assert main([str(model), "--target", "ascend950", "--emit", "onnx", "-o", str(out), "-q", *flags]) == 0
        report = json.loads((out / "report.json").read_text())
        assert len(report["fusions"]) == fusions
        assert all(f["pattern"] == "smooth_l1_grad/meaning" for f in report["fusions"])
