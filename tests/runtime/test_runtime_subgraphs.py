"""Running fused models whose If/Loop/Scan bodies hold fused nodes: every fixture of
tests/fixtures/subgraphs/ diffs PASS on the cpu backend, each fused node checked in every run it
made; the control-flow semantics against onnxruntime; `lower --verify` on a 100-iteration loop."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from app.cli import main
from lowering import fuse
from runtime.backends.cpu import CpuBackend
from runtime.control_flow import run_loop, run_scan
from runtime.diff import diff_models
from runtime.inputs import edge_hints
from runtime.report import DiffReport, format_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from subgraph_fixtures import FOLDER, entries, feeds, load, run_ort  # noqa: E402

FUSING = [e for e in entries() if e["fuses"]]


def _diff(entry: dict, seed: int, **overrides: object) -> DiffReport:
    model = load(entry)
    fused, _ = fuse(model)
    inputs = feeds(entry, model, seed)
    inputs.update({k: np.full_like(inputs[k], v) for k, v in overrides.items()})
    report = DiffReport("unfused", "fused", "cpu", "ascend950", "manifest", {})
    return diff_models(model, fused, inputs, CpuBackend(), "ascend950", report)


@pytest.mark.parametrize("entry", FUSING, ids=lambda e: e["file"])
def test_a_fused_model_with_fused_nodes_in_bodies_diffs_pass(entry: dict, seed: int) -> None:
    report = _diff(entry, seed)
    assert report.passed, format_table(report)
    nodes = [r for r in report.rows if r.kind == "node"]
    assert len(nodes) == sum(entry["fuses"].values())
    assert all(r.checked.startswith("checked in ") for r in nodes), format_table(report)


def test_a_node_in_a_loop_body_is_checked_in_every_iteration(seed: int) -> None:
    entry = next(e for e in FUSING if e["file"] == "hand_loop_ista_100.onnx")
    report = _diff(entry, seed)
    node, = (r for r in report.rows if r.kind == "node")
    assert node.checked == "checked in 100 iterations of Loop(w)/body"
    assert node.comparison.shape == (100, 8, 16)  # each iteration's inputs and outputs, stacked
    assert "fused nodes inside If/Loop/Scan bodies:" in format_table(report)


def test_nested_bodies_count_the_runs_of_the_innermost(seed: int) -> None:
    entry = next(e for e in FUSING if e["file"] == "hand_nested_loops_smooth_l1.onnx")
    node, = (r for r in _diff(entry, seed).rows if r.kind == "node")
    assert node.checked == "checked in 9 iterations of Loop(p)/body/Loop(pout)/body"


def test_a_branch_taken_in_some_iterations_is_checked_in_those(seed: int) -> None:
    entry = next(e for e in FUSING if e["file"] == "hand_if_in_loop.onnx")
    node, = (r for r in _diff(entry, seed).rows if r.kind == "node")
    assert node.checked == "checked in 3 runs of Loop(w)/body/If(wout)/then_branch, the branch taken"


def test_a_node_in_a_branch_not_taken_is_reported_as_not_run(seed: int) -> None:
    entry = next(e for e in FUSING if e["file"] == "tf_cond_prox.onnx")
    report = _diff(entry, seed, apply=False)
    node, = (r for r in report.rows if r.kind == "node")
    assert node.reference == "not run" and "cond/then_branch" in node.checked
    assert node.status == "SKIP" and node.skipped == node.checked  # compared nothing: not counted as run
    assert report.passed  # the graph output, computed by the other branch, still matches
    assert "PASS: 1 of 1 comparisons that ran (1 skipped)" in format_table(report)


def _training_loop(scale_in_body: bool) -> onnx.ModelProto:
    """hand_loop_ista_100's loop (3 iterations) in a graph onnxruntime cannot run whole: y goes
    through com.microsoft Scale (in the main graph or in the body) and the result into an
    InPlaceAccumulatorV2's buffer."""
    scale = "ys = com.microsoft.Scale <scale_down: int = 1> (y, two)"
    return onnx.parser.parse_model(f"""<ir_version: 9, opset_import: ["" : 18, "com.microsoft" : 1]>
main (float[8,8] A, float[8,16] y, float[8,16] w0, float lr, float l1, float l2, float[8,16] buf)
    => (float[8,16] w, bool[1] flag) {{
   m = Constant <value: tensor = int64 {{3}}> ()
   c = Constant <value: tensor = bool {{1}}> ()
   zero = Constant <value: tensor = float {{0}}> ()
   one = Constant <value: tensor = float {{1}}> ()
   two = Constant <value: tensor = float[1] {{2}}> ()
   at = Transpose <perm: ints = [1, 0]> (A)
   {"" if scale_in_body else scale}
   w = Loop (m, c, w0) <body: graph = ista (int64 i, bool cin, float[8,16] win) => (bool cout, float[8,16] wout) {{
      {scale if scale_in_body else ""}
      cout = Identity (cin)
      aw = MatMul (A, win)
      r = Sub (aw, ys)
      gr = MatMul (at, r)
      st = Mul (lr, gr)
      p_ = Sub (win, st)
      t_ = Mul (lr, l1)
      a_ = Abs (p_)
      d_ = Sub (a_, t_)
      z_ = Max (d_, zero)
      s_ = Sign (p_)
      n_ = Mul (s_, z_)
      q_ = Mul (lr, l2)
      den_ = Add (one, q_)
      wout = Div (n_, den_)
   }}>
   flag = com.microsoft.InPlaceAccumulatorV2 (buf, w)
}}""")


def _training_feeds(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def normal(*shape: int, std: float = 1.0) -> np.ndarray:
        return (std * rng.standard_normal(shape)).astype(np.float32)

    return {"A": normal(8, 8, std=0.2), "y": normal(8, 16), "w0": normal(8, 16), "buf": normal(8, 16),
            "lr": np.float32(rng.uniform(0.05, 0.5)), "l1": np.float32(rng.uniform(0, 0.2)),
            "l2": np.float32(rng.uniform(0, 0.2))}


def _diff_training_loop(scale_in_body: bool, rng: np.random.Generator) -> DiffReport:
    model = _training_loop(scale_in_body)
    fused, fusion = fuse(model)
    assert [f.graph for f in fusion.fusions] == ["Loop(w)/body"]
    report = DiffReport("unfused", "fused", "cpu", "ascend950", "seeded", {})
    return diff_models(model, fused, _training_feeds(rng), CpuBackend(), "ascend950", report)


def test_a_loop_holding_a_fused_node_runs_beside_lowers_own_ops(rng: np.random.Generator) -> None:
    """The partial check and fused nodes in bodies together: lower's Scale and accumulator run in
    the main graph, the loop here with its fused node on the backend in every iteration."""
    report = _diff_training_loop(False, rng)
    table = format_table(report)
    assert report.passed and all(r.status == "PASS" for r in report.rows), table
    assert [(r.kind, r.name) for r in report.rows] == [
        ("output", "w"), ("output", "flag"), ("update", "buf"), ("node", "ApplyProximalGradientDescent_0")]
    node = report.rows[-1]
    assert node.checked == "checked in 3 iterations of Loop(w)/body" and node.comparison.shape == (3, 8, 16)
    assert node.reference == "matched subgraph"
    assert report.rows[0].partial and report.rows[2].partial  # the loop's output rests on lower's Scale
    assert "lower ran com.microsoft Scale, com.microsoft InPlaceAccumulatorV2" in report.partial


def test_a_loop_whose_body_holds_lowers_own_op_is_skipped_with_the_op_named(rng: np.random.Generator) -> None:
    report = _diff_training_loop(True, rng)
    assert [r.status for r in report.rows] == ["SKIP"] * 3, format_table(report)
    node = report.rows[-1]
    assert (node.kind, node.reference) == ("node", "matched subgraph")
    assert node.skipped == "needs com.microsoft Scale inside Loop(w)/body, which lower runs only in the main graph"
    assert report.rows[0].skipped == node.skipped  # the unfused graph's loop cannot run either


SCAN = """<ir_version: 9, opset_import: ["" : 18]>
main (float[3] s0, float[2,4,3] xs, float[5,3] zs) => (float[3] s, float[2,3,4] ys, float[5,3] ws) {
  s, ys, ws = Scan<num_scan_inputs = 2, scan_input_axes = [1, 0], scan_input_directions = [1, 0],
                   scan_output_axes = [-1, 0], scan_output_directions = [0, 1],
                   body = step (float[3] si, float[2,3] x, float[3] z) => (float[3] so, float[2,3] y, float[3] w) {
      axes = Constant<value = int64[1] {0}>()
      r = ReduceSum<keepdims = 0>(x, axes)
      so = Add(si, r)
      y = Mul(x, si)
      w = Sub(z, si)
  }>(s0, xs, zs)
}"""


def _python_body(si: np.ndarray, x: np.ndarray, z: np.ndarray) -> list[np.ndarray]:
    return [si + x.sum(axis=0), x * si, z - si]


def test_scan_directions_and_axes_follow_onnxruntime(rng: np.random.Generator) -> None:
    model = onnx.parser.parse_model(SCAN)
    node = model.graph.node[0]
    read = {"s0": rng.standard_normal(3).astype(np.float32), "xs": rng.standard_normal((2, 4, 3)).astype(np.float32),
            "zs": rng.standard_normal((5, 3)).astype(np.float32)}
    with pytest.raises(Exception, match="different lengths"):
        run_scan(node, read, lambda attribute, formals: _python_body(*formals))
    read["zs"] = read["zs"][:4]
    model.graph.input[2].type.tensor_type.shape.dim[0].dim_value = 4
    model.graph.output[2].type.tensor_type.shape.dim[0].dim_value = 4
    ours = run_scan(node, read, lambda attribute, formals: _python_body(*formals))
    for mine, theirs in zip(ours, run_ort(model, read)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)


LOOP = """<ir_version: 9, opset_import: ["" : 18]>
main (int64 m, bool c, float[2] v0) => (float[2] v, float[N,2] vs) {
  v, vs = Loop(m, c, v0) <body = step (int64 i, bool cin, float[2] vin) => (bool cout, float[2] vout, float[2] keep) {
      fi = Cast<to = 1>(i)
      vout = Add(vin, fi)
      keep = Identity(vin)
      lim = Constant<value = float {6}>()
      s = ReduceSum<keepdims = 0>(vout)
      cout = Less(s, lim)
  }>
}"""


@pytest.mark.parametrize("m, c", [(10, True), (2, True), (10, False), (0, True)])
def test_loop_bounds_and_conditions_follow_onnxruntime(m: int, c: bool) -> None:
    model = onnx.parser.parse_model(LOOP)
    node = model.graph.node[0]
    read = {"m": np.array(m, np.int64), "c": np.array(c), "v0": np.array([0.5, -1.0], np.float32)}

    def body(attribute: str, formals: list[np.ndarray]) -> list[np.ndarray]:
        i, _, vin = formals
        vout = vin + np.float32(i)
        return [np.array(vout.sum() < 6), vout, vin]

    ours = run_loop(node, read, body)
    for mine, theirs in zip(ours, run_ort(model, read)):
        assert mine.shape == theirs.shape
        np.testing.assert_array_equal(mine, theirs)


def test_lower_verifies_a_100_iteration_loop_in_seconds(tmp_path, capsys, seed: int) -> None:
    entry = next(e for e in FUSING if e["file"] == "hand_loop_ista_100.onnx")
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, **feeds(entry, load(entry), seed))
    start = time.perf_counter()
    code = main([str(FOLDER / entry["file"]), "--target", "ascend950", "-o", str(tmp_path / "out"), "--verify",
                 "--inputs", str(inputs)])
    elapsed = time.perf_counter() - start
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "ApplyProximalGradientDescent_0: checked in 100 iterations of Loop(w)/body" in printed
    assert elapsed < 10, f"{elapsed:.1f} s"


@pytest.mark.parametrize("name", ["tf_while_ista.onnx", "jax_fori_ista.onnx", "hand_scan_prox.onnx"])
def test_generated_inputs_draw_a_solvers_scalars_as_the_fused_ops(name: str) -> None:
    """tf2onnx and jax2onnx carry lr, l1 and l2 through the loop unchanged; the hints follow them
    back to the graph inputs, so --verify draws them in the op's ranges, not as N(0, 2) tensors."""
    fused, _ = fuse(str(FOLDER / name))
    scalars = edge_hints(fused).scalars
    lr, l1, l2 = (next(k for k in scalars if k.lower() == n) for n in ("lr", "l1", "l2"))
    assert (scalars[lr][1], scalars[l1][1], scalars[l2][1]) == ("alpha", "l1", "l2")
