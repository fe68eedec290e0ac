"""`lower diff` / `--verify` entry points: end-to-end fused execution, reports, exit codes."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T

import lowering
from app.diff_cli import run_diff, run_verify
from lowering.loading import load
from runtime.backends import get_backend
from runtime.graph_exec import run_fused_model

REPO = Path(__file__).resolve().parents[2]
SAMPLE_MODELS = sorted(glob.glob(str(REPO / "models" / "*.onnx")))
# onnxruntime-training's graphs among them verify partially (tests/runtime/test_runtime_partial.py)
FIXTURE_MODELS = sorted(glob.glob(str(REPO / "tests" / "fixtures" / "*" / "*.onnx")))


def _save(model: onnx.ModelProto, path: Path) -> str:
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("dtype", [T.FLOAT, T.FLOAT16, T.BFLOAT16])
def test_hand_fused_model_passes_and_json_matches_table(build, diff_args, tmp_path, capsys, dtype):
    unfused = _save(build.unfused_for_hand_fused(dtype=dtype), tmp_path / "u.onnx")
    fused = _save(build.fused_smooth_l1_model(dtype=dtype), tmp_path / "f.onnx")
    out_json = tmp_path / "r.json"
    rc = run_diff(unfused, fused, diff_args("--seed", "4", "--json", str(out_json)))
    table = capsys.readouterr().out
    assert rc == 0, table
    data = json.loads(out_json.read_text())
    assert data["status"] == "PASS" and data["inputs"] == "generated, seed 4"
    assert [(r["kind"], r["name"], r["status"]) for r in data["rows"]] == [
        ("output", "out", "PASS"), ("node", "SmoothL1LossGradV2_0", "PASS")]
    assert data["rows"][1]["reference"] == "matched subgraph"
    assert "SmoothL1LossGradV2_0" in table and "PASS: 2 of 2" in table


def test_changed_sigma_fails_and_names_the_node(build, diff_args, tmp_path, capsys):
    unfused = _save(build.unfused_for_hand_fused(beta=1.0), tmp_path / "u.onnx")
    fused = _save(build.fused_smooth_l1_model(beta=1.0, node_sigma=0.5, node_name="the_broken_one"),
                  tmp_path / "f.onnx")
    rc = run_diff(unfused, fused, diff_args("--json", str(tmp_path / "r.json")))
    out = capsys.readouterr().out
    assert rc == 1
    assert "fused node the_broken_one (SmoothL1LossGradV2)" in out
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    node = next(r for r in rows if r["kind"] == "node")
    assert node["name"] == "the_broken_one" and node["status"] == "FAIL"


def test_broken_node_of_a_pass_made_model_fails(build, diff_args, capsys):
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    node = next(n for n in fused.graph.node if n.op_type == "ApplyProximalGradientDescent")
    for a in node.attribute:
        if a.name == "scalar_form":
            a.s = b"folded"  # the kernel now reads l1 as the threshold, the body does not
    rc = run_verify(model, fused, "ascend910b", diff_args())
    out = capsys.readouterr().out
    assert rc == 1 and f"fused node {node.name} (ApplyProximalGradientDescent)" in out


def test_miswired_fused_node_fails_at_the_output(build, diff_args, capsys):
    # Swapped inputs feed the kernel and its function body alike, so only the output row sees it.
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    node = next(n for n in fused.graph.node if n.op_type == "ApplyProximalGradientDescent")
    node.input[1], node.input[2] = node.input[2], node.input[1]
    assert run_verify(model, fused, "ascend910b", diff_args()) == 1
    assert "output out:" in capsys.readouterr().out


def test_fused_result_comes_from_the_kernel_not_the_function_body(build):
    fused = build.fused_smooth_l1_model(shape=(2, 64))

    class Marker(type(get_backend("cpu"))):
        def run(self, call):
            out = super().run(call)
            return {k: np.full_like(v, 42) for k, v in out.items()}

    feeds = {n: np.ones((2, 64), np.float32) for n in "pld"}
    outputs, runs = run_fused_model(fused, feeds, Marker(), "ascend950")
    assert np.all(outputs["out"] == 42) and len(runs) == 1


def test_mixed_graph_runs_standard_nodes_around_fused_ones(build, diff_args, capsys):
    # a standard node before and after the fused subgraph
    model = build.smooth_l1_model(shape=(3, 200))
    g = model.graph
    g.node.insert(0, onnx.helper.make_node("Relu", ["dout_raw"], ["dout"]))
    g.input[2].name = "dout_raw"
    g.node.append(onnx.helper.make_node("Neg", ["out"], ["neg_out"]))
    g.output.append(onnx.helper.make_tensor_value_info("neg_out", T.FLOAT, [3, 200]))
    fused, report = lowering.fuse(model)
    assert report.fusions
    assert run_verify(model, fused, "ascend950", diff_args("--seed", "9")) == 0
    assert "neg_out" in capsys.readouterr().out


def test_a_node_reading_one_value_twice_runs(build, diff_args, capsys):
    # dynamo writes Slice(t, c, c, c); the segment model must declare c once
    model = build.smooth_l1_model(shape=(3, 200))
    g = model.graph
    g.node.insert(0, onnx.helper.make_node("Mul", ["dout_raw", "dout_raw"], ["dout"]))
    g.input[2].name = "dout_raw"
    g.node.append(onnx.helper.make_node("Add", ["out", "out"], ["twice"]))
    g.output.append(onnx.helper.make_tensor_value_info("twice", T.FLOAT, [3, 200]))
    fused, report = lowering.fuse(model)
    assert report.fusions
    assert run_verify(model, fused, "ascend950", diff_args("--seed", "4")) == 0
    assert run_verify(model, model, "ascend950", diff_args("--seed", "4")) == 0  # nothing fused: one segment
    assert "twice" in capsys.readouterr().out


def test_inputs_from_npz_and_shape_options(build, diff_args, tmp_path, capsys):
    model = build.smooth_l1_model(shape=(4, 5), dynamic=True)
    fused, _ = lowering.fuse(model)
    assert run_verify(model, fused, "ascend950", diff_args()) == 2
    assert "--shape" in capsys.readouterr().err
    assert run_verify(model, fused, "ascend950", diff_args("--shape", "predict=7,5")) == 0
    rng = np.random.default_rng(0)
    npz = tmp_path / "in.npz"
    np.savez(npz, **{n: rng.normal(size=(3, 5)).astype(np.float32) for n in ("predict", "label", "dout")})
    capsys.readouterr()
    assert run_verify(model, fused, "ascend950", diff_args("--inputs", str(npz))) == 0
    assert str(npz) in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (("--inputs", "/nonexistent.npz"), "no such file"),
    (("--shape", "nope=3"), "no such input"),
    (("--shape", "predict=3;4"), "DIMS"),
    (("--backend", "npu"), "npu backend"),
])
def test_bad_input_is_exit_2_with_one_line(build, diff_args, capsys, argv, message):
    model = build.smooth_l1_model()
    fused, _ = lowering.fuse(model)
    assert run_verify(model, fused, "ascend950", diff_args(*argv)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_model_file_is_exit_2(diff_args, tmp_path, capsys):
    assert run_diff(tmp_path / "none.onnx", tmp_path / "none2.onnx", diff_args()) == 2
    assert "no such file" in capsys.readouterr().err


def test_unknown_target_is_exit_2(build, diff_args, capsys):
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    assert run_verify(model, fused, "ascend999", diff_args()) == 2
    assert "known targets" in capsys.readouterr().err


def test_model_names_are_escaped_in_the_table(build, diff_args, tmp_path, capsys):
    unfused = _save(build.unfused_for_hand_fused(), tmp_path / "u.onnx")
    fused = _save(build.fused_smooth_l1_model(node_name="evil\x1b[2J\nname"), tmp_path / "f.onnx")
    assert run_diff(unfused, fused, diff_args()) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2J\\nname" in out


@pytest.mark.parametrize("path", SAMPLE_MODELS + FIXTURE_MODELS, ids=lambda p: Path(p).name)
def test_every_shipped_model_verifies(diff_args, capsys, path):
    model = load(path).model
    fused, _ = lowering.fuse(model)
    specs = [i for i in model.graph.input if any(d.dim_param for d in i.type.tensor_type.shape.dim)]
    shape_args: list[str] = []
    for vi in specs:  # every unknown dimension 6, so inputs with differently named ones still agree
        dims = [d.dim_value or 6 for d in vi.type.tensor_type.shape.dim]
        shape_args += ["--shape", f"{vi.name}={','.join(map(str, dims))}"]
    rc = run_verify(model, fused, "ascend950", diff_args("--seed", "1", *shape_args))
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err


def test_no_progress_lines_for_a_short_run(build, diff_args, capsys):
    small = build.prox_model(shape=(1000,))
    fused, _ = lowering.fuse(small)
    assert run_verify(small, fused, "ascend950", diff_args()) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("dims,message", [((-1, 5), "negative dimension"), ((100000, 100000), "more than")])
def test_inputs_too_big_or_negative_to_generate_are_exit_2(build, diff_args, capsys, dims, message):
    model = build.smooth_l1_model(shape=(4, 5))
    fused, _ = lowering.fuse(model)
    for m in (model, fused):
        for vi in m.graph.input:
            if vi.name == "predict":
                for d, v in zip(vi.type.tensor_type.shape.dim, dims):
                    d.dim_value = v
    assert run_verify(model, fused, "ascend950", diff_args()) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_onnxruntime_failing_at_run_time_is_one_line(build, tmp_path):
    # a ReduceSum beside the fused node whose axis, a graph input, is out of range: onnxruntime
    # fails inside the kernel, and its C++ logger would print that to stderr before the
    # exception the diff words in one line (a fresh process, as the logger is per process)
    model = build.smooth_l1_model(shape=(4, 5))
    model.graph.input.append(onnx.helper.make_tensor_value_info("axis", T.INT64, [1]))
    model.graph.node.append(onnx.helper.make_node("ReduceSum", ["predict", "axis"], ["total"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("total", T.FLOAT, []))
    fused, _ = lowering.fuse(model)
    npz = tmp_path / "in.npz"
    rng = np.random.default_rng(0)
    np.savez(npz, **{n: rng.normal(size=(4, 5)).astype(np.float32) for n in ("predict", "label", "dout")},
             axis=np.array([5]))
    result = subprocess.run([sys.executable, "-m", "app.cli", "diff", _save(model, tmp_path / "m.onnx"),
                             _save(fused, tmp_path / "f.onnx"), "--inputs", str(npz)], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "onnxruntime" in result.stderr, result.stderr


def test_generated_inputs_skip_hints_for_inputs_with_defaults(build, diff_args, capsys):
    # var is a graph input that is also an initializer: it keeps its default and is not generated
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    for m in (model, fused):
        var = next(vi for vi in m.graph.input if vi.name == "var")
        m.graph.initializer.append(onnx.numpy_helper.from_array(
            np.full([d.dim_value for d in var.type.tensor_type.shape.dim], 0.5, np.float32), "var"))
    assert run_verify(model, fused, "ascend950", diff_args("--edge-nonfinite")) == 0, capsys.readouterr().err


def test_fused_attribute_that_is_not_utf8_is_one_line(build, diff_args, tmp_path, capsys):
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    node = next(n for n in fused.graph.node if n.domain == "com.huawei.ascend")
    next(a for a in node.attribute if a.name == "scalar_form").s = b"\xff\xfe"
    assert run_diff(_save(model, tmp_path / "m.onnx"), _save(fused, tmp_path / "f.onnx"), diff_args()) == 2
    err = capsys.readouterr().err
    assert "scalar_form" in err and err.count("\n") == 1, err


def test_nan_from_an_arithmetic_select_is_the_blend_variant(diff_args, tmp_path, capsys):
    # tf2onnx's select with an inf x: the graph's 0 * inf is NaN, and so is the fused node's (the
    # proof chose the op's blend variant), so the diff passes at that input
    h = onnx.helper
    nodes = [h.make_node("Sub", ["predict", "label"], ["x"]), h.make_node("Abs", ["x"], ["n"]),
             h.make_node("Less", ["n", "beta"], ["c"]), h.make_node("Cast", ["c"], ["m"], to=T.FLOAT),
             h.make_node("Not", ["c"], ["nc"]), h.make_node("Cast", ["nc"], ["mn"], to=T.FLOAT),
             h.make_node("Div", ["x", "beta"], ["lin"]), h.make_node("Sign", ["x"], ["s"]),
             h.make_node("Mul", ["m", "lin"], ["a"]), h.make_node("Mul", ["s", "mn"], ["b"]),
             h.make_node("Add", ["a", "b"], ["out"])]
    ins = [h.make_tensor_value_info(n, T.FLOAT, [3, 4]) for n in ("predict", "label")]
    graph = h.make_graph(nodes, "tf2onnx_select", ins, [h.make_tensor_value_info("out", T.FLOAT, [3, 4])],
                         [h.make_tensor("beta", T.FLOAT, [], [0.5])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    fused, report = lowering.fuse(model)
    assert [f.attributes["nonfinite"] for f in report.fusions] == ["blend"]
    npz = tmp_path / "in.npz"
    predict = np.zeros((3, 4), np.float32)
    predict[0, 0] = np.inf
    np.savez(npz, predict=predict, label=np.zeros((3, 4), np.float32))
    assert run_verify(model, fused, "ascend950", diff_args("--inputs", str(npz))) == 0
    assert "PASS" in capsys.readouterr().out


def _keep_io_half_smooth_l1() -> onnx.ModelProto:
    """A SmoothL1 backward computed in float16 between float32 graph inputs and output, as
    onnxconverter-common's keep_io_types writes it."""
    from onnx import helper as h
    from onnx import numpy_helper

    shape = [8, 16]
    nodes = [h.make_node("Cast", [n + "32"], [n], to=T.FLOAT16) for n in ("p", "t", "go")]
    nodes += [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
              h.make_node("Less", ["ax", "beta"], ["c"]), h.make_node("Mul", ["go", "norm"], ["g"]),
              h.make_node("Mul", ["g", "x"], ["gx"]), h.make_node("Div", ["gx", "beta"], ["lin"]),
              h.make_node("Sign", ["x"], ["s"]), h.make_node("Mul", ["g", "s"], ["out_sign"]),
              h.make_node("Where", ["c", "lin", "out_sign"], ["grad16"]),
              h.make_node("Cast", ["grad16"], ["grad"], to=T.FLOAT)]
    inits = [numpy_helper.from_array(np.array(v, np.float16), n) for n, v in (("beta", 0.5), ("norm", 1 / 128))]
    graph = h.make_graph(nodes, "keep_io", [h.make_tensor_value_info("p32", T.FLOAT, shape),
                                            h.make_tensor_value_info("t32", T.FLOAT, shape),
                                            h.make_tensor_value_info("go32", T.FLOAT, [])],
                         [h.make_tensor_value_info("grad", T.FLOAT, shape)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("seed", range(4))
def test_float32_output_of_a_float16_computation_is_held_to_float16(diff_args, tmp_path, capsys, seed):
    # onnxruntime's CPU runs the float16 chain in float32 and rounds nowhere, the fused node rounds
    # its result to float16 as the graph says: float32's bar failed every such model
    model = _keep_io_half_smooth_l1()
    fused, report = lowering.fuse(model)
    assert report.counts() == {"SmoothL1LossGradV2": 1}
    rc = run_diff(_save(model, tmp_path / "u.onnx"), _save(fused, tmp_path / "f.onnx"),
                  diff_args("--seed", str(seed), "--json", str(tmp_path / "r.json")))
    table = capsys.readouterr().out
    assert rc == 0, table
    output, _ = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert output["name"] == "grad" and output["threshold"] == 2.0**-10, table
    assert "held to float16's threshold" in output["note"] and "rounded to float16" in output["note"]


def test_inputs_the_graph_casts_to_float16_are_generated_as_float16_values(build):
    # else onnxruntime's CPU, which drops the Cast pair and computes on in float32, reads more
    # digits of p - t than the float16 graph has, and the reference is not the graph's
    from runtime.inputs import edge_hints, generate_inputs, model_input_specs, resolve_shapes

    model = _keep_io_half_smooth_l1()
    fused, _ = lowering.fuse(model)
    specs = model_input_specs(model)
    feeds = generate_inputs(specs, resolve_shapes(specs, {}), 0, False, edge_hints(fused))
    for name in ("p32", "t32", "go32"):
        values = feeds[name]
        assert values.dtype == np.float32 and np.array_equal(values, values.astype(np.float16).astype(np.float32))
    assert not np.array_equal(feeds["p32"], np.round(feeds["p32"]))  # still random, not integers
