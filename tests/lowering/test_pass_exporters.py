"""The pass on real exporter output (torch.onnx.export dynamo and TorchScript, see models/make_models.py;
tf2onnx, see models/make_tf_models.py).

For every fixture: the fusion counts of the manifest; onnxruntime gives identical results on the
fused model (through the function bodies); and each fused node's own output, fetched from inside
the fused model, agrees with the contract's float64 formula applied to the node's own inputs and
attributes, so the attributes (sigma, reduction, scale, scalar_form) are proven, not just present:
within the CANN precision standard, or, for a proximal update the exporter's graph computes in
float16 itself (or a float32 one where |p| - t cancels), within the bound of that graph's own
roundings (pass_numerics.rounding_bound_ok).
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from fixture_manifests import manifest_entries, on_grid
from pass_numerics import assert_same_outputs, fused_nodes, golden_of, precision_ok, rounding_bound_ok, run_ort

import lowering
from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = manifest_entries()
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _feeds(entry: dict, rng: np.random.Generator, edges: bool) -> dict[str, np.ndarray]:
    feeds = {}
    for name, spec in entry["inputs"].items():
        dtype = DTYPES[spec["dtype"]]
        shape = spec["shape"]
        if "range" in spec:
            value = rng.uniform(*spec["range"], size=shape)
        else:
            value = rng.standard_normal(shape) * spec.get("scale", 2.0)
        feeds[name] = on_grid(np.asarray(value, np.float32), spec).astype(dtype)
    if edges:
        for name, value in feeds.items():
            if value.size >= 8 and "range" not in entry["inputs"][name]:
                flat = value.reshape(-1)
                flat[:4] = np.array([0.0, -0.0, 0.5, -0.5], np.float32).astype(value.dtype)
    return feeds


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """The model with extra graph outputs, to read values from inside it."""
    out = onnx.shape_inference.infer_shapes(model)  # a copy, with types for values the exporter left untyped
    known = {o.name for o in out.graph.output} | {i.name for i in out.graph.input}
    types = {vi.name: vi for vi in list(out.graph.value_info) + list(out.graph.output) + list(out.graph.input)}
    for name in names:
        if name not in known and name in types:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(types[name])
            out.graph.output.append(vi)
            known.add(name)
    return out


def _computes_in_half(model: onnx.ModelProto, node: onnx.NodeProto, dtype: np.dtype) -> bool:
    """A float16/bfloat16 node whose matched graph computes on its first input (var, predict)
    in that dtype instead of widening it to float32 first."""
    if dtype not in (np.float16, ml_dtypes.bfloat16):
        return False
    body = next(f for f in model.functions if f.overload == node.overload)
    users = [n for n in body.node if body.input[0] in n.input]
    return not all(n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT for n in users)


@pytest.mark.parametrize("entry", MANIFEST, ids=[Path(e["file"]).stem for e in MANIFEST])
def test_exporter_fixture(entry: dict, rng: np.random.Generator) -> None:
    model = onnx.load(str(ROOT / entry["file"]))
    fused, report = lowering.fuse(model)
    expected = {k: v for k, v in entry["expected"].items() if v}
    assert report.counts() == expected, report.summary()
    onnx.checker.check_model(fused, full_check=True)
    for edges in (False, True):
        feeds = _feeds(entry, rng, edges)
        assert_same_outputs(model, fused, feeds)
    nodes = fused_nodes(fused)
    if not nodes:
        return
    wanted = sorted({n for node in nodes for n in list(node.input) + list(node.output)})
    probe = _with_outputs(fused, wanted)
    values = dict(zip([o.name for o in probe.graph.output], run_ort(probe, feeds)))
    for node in nodes:
        args = {n: values[n] for n in node.input if n in values}
        actual = values[node.output[0]]
        if node.op_type == PROXIMAL_GD and _computes_in_half(fused, node, actual.dtype):
            ok, detail = rounding_bound_ok(fused, node, {**feeds, **args}, actual)
        else:
            ok, detail = precision_ok(actual, golden_of(fused, node, {**feeds, **args}), actual.dtype)
            if not ok and node.op_type == PROXIMAL_GD:  # a float32 graph's p cancelling against t
                ok, bound = rounding_bound_ok(fused, node, {**feeds, **args}, actual)
                detail = f"{detail}; {bound}"
        assert ok, f"{node.name}: {detail}"
    sl1_expected = [a for a in entry.get("attrs", []) if a["op"] == SMOOTH_L1_GRAD]
    sl1_fused = [f for f in report.fusions if f.op_type == SMOOTH_L1_GRAD]
    for want in sl1_expected:
        # tf2onnx names its outputs through a last Identity (or a Cast back to float16), so the
        # fused node may write the value that node reads; a lone instance is then the lone fusion
        same_name = [f for f in sl1_fused if f.output == want["output"]]
        got, = same_name or (sl1_fused if len(sl1_fused) == len(sl1_expected) == 1 else [None])
        assert got is not None, f"no SmoothL1 fusion for {want['output']}"
        # the beta the script passed, or that beta as a half-precision graph holds it (a graph that
        # compares a widened float16 with beta and divides by beta in float16 is the SmoothL1 of
        # the float16 beta on every input it can get)
        held = [want["sigma"]] + ([float(DTYPES[entry["dtype"]](want["sigma"]))]
                                  if entry.get("dtype") in ("float16", "bfloat16") else [])
        assert any(got.attributes["sigma"] == pytest.approx(b, rel=1e-6) for b in held), got.attributes


HALF_PROXIMAL = [e for e in MANIFEST if e["family"] == "proximal_gd" and e["dtype"] == "float16"
                 and "_cast" not in e["file"] and e["expected"].get("ApplyProximalGradientDescent")]


@pytest.mark.parametrize("entry", MANIFEST, ids=[Path(e["file"]).stem for e in MANIFEST])
def test_fixture_without_value_info_fuses_alike(entry: dict) -> None:
    """Post-processing tools and hand edits drop value_info; the shapes a match needs then come
    from the values' producers (Shape -> Concat/Slice -> Reshape/Expand chains of views and
    ones_like included), and the fusions are the same, with the same inputs and attributes."""
    model = onnx.load(str(ROOT / entry["file"]))
    _, declared = lowering.fuse(model)
    del model.graph.value_info[:]
    _, stripped = lowering.fuse(model)
    assert stripped.counts() == {k: v for k, v in entry["expected"].items() if v}, stripped.summary()
    assert [(f.op_type, f.inputs, f.attributes) for f in stripped.fusions] == \
        [(f.op_type, f.inputs, f.attributes) for f in declared.fusions]


@pytest.mark.parametrize("entry", HALF_PROXIMAL, ids=[Path(e["file"]).stem for e in HALF_PROXIMAL])
def test_half_graph_bound_catches_a_wrong_alpha(entry: dict, rng: np.random.Generator) -> None:
    """The rounding bound that replaces the relative error for float16 graphs still has teeth:
    a golden computed with alpha 1% off is refused."""
    fused, _ = lowering.fuse(onnx.load(str(ROOT / entry["file"])))
    node, = fused_nodes(fused)
    feeds = _feeds(entry, rng, edges=False)
    probe = _with_outputs(fused, sorted(set(node.input) | set(node.output)))
    values = dict(zip([o.name for o in probe.graph.output], run_ort(probe, feeds)))
    known = {**feeds, **{n: values[n] for n in node.input if n in values}}
    actual = values[node.output[0]]
    assert _computes_in_half(fused, node, actual.dtype)
    assert rounding_bound_ok(fused, node, known, actual)[0]
    alpha = node.input[1]
    value = known[alpha] if alpha in known else next(
        onnx.numpy_helper.to_array(t) for t in fused.graph.initializer if t.name == alpha)
    known[alpha] = np.asarray(value * 1.01, value.dtype)
    assert not rounding_bound_ok(fused, node, known, actual)[0]


@pytest.mark.parametrize("fixture, reason, anchor", [
    # unoptimized, the bounds are CastLike(-t, p) and CastLike(t, p): casts to the type they have
    ("exporters/nm_prox_tensor_clamp_residual_f32_dyn.onnx", "t is a runtime value", ("proximal_gd", "Div")),
    # float32 masks on float16 values: float32 results from values rounded to float16
    ("exporters/nm_sl1_hand_masks_two_sum_b05_f16_dynopt.onnx", "a float32 mask times widened values",
     ("smooth_l1_grad", "Add")),
    ("exporters/nm_prox_tensor_masked_f16_dynopt.onnx", "a float32 mask times widened values", ("proximal_gd", "Div")),
    ("tf2onnx/nm_sl1_hand_min_max_sum_b1_f32_op13.onnx", "both hold at |x| == 1", ("smooth_l1_grad", "Mul")),
])
def test_exporter_near_miss_is_reported_with_its_reason(fixture: str, reason: str, anchor: tuple[str, str]) -> None:
    model = onnx.load(str(ROOT / "tests/fixtures" / fixture))
    fused, report = lowering.fuse(model)
    assert not report.fusions
    assert [(r.pattern, r.op_type) for r in report.rejections if reason in r.reason] == [anchor], report.rejections


@pytest.mark.parametrize("fixture", ["sl1_hand_where_then_scale_mean_b05_f32_dynopt.onnx",
                                     "sl1_hand_where_then_scale_mean_b05_f32_ts.onnx"])
def test_scaling_after_the_select_joins_the_fusion(fixture: str) -> None:
    model = onnx.load(str(ROOT / "tests/fixtures/exporters" / fixture))
    fused, report = lowering.fuse(model)
    fusion, = report.fusions
    assert [n.op_type for n in fused.graph.node] == [SMOOTH_L1_GRAD]
    assert fusion.attributes["reduction"] == "mean" and fusion.inputs[2] == "go"


def test_distinct_unknown_dims_get_a_hint_that_works() -> None:
    from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

    model = onnx.load(str(ROOT / "tests/fixtures/tf2onnx/nm_prox_tensor_maximum_f32_dynamic_op13.onnx"))
    _, report = lowering.fuse(model, by_meaning=False)  # the recogniser fuses it with Expands (issue 18)
    reason, = [r.reason for r in report.rejections if "shapes differ" in r.reason]
    assert "if unk__0, unk__1 are one size at runtime, fix them, e.g. python -m " \
           "onnxruntime.tools.make_dynamic_shape_fixed --dim_param unk__0 --dim_value N" in reason
    for name in ("unk__0", "unk__1"):  # what the hint says, through the tool's own function
        make_dim_param_fixed(model.graph, name, 7)
    fused, report = lowering.fuse(model)
    assert [f.op_type for f in report.fusions] == [PROXIMAL_GD]
