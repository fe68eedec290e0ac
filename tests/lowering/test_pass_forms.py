"""Every form of the two families (docs/matched-forms.md) fuses into one node with the right attributes and numerics."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from pass_forms import BF, PGD, SL1, F, H, pgd, sl1
from pass_numerics import assert_runs_as_fused, assert_same, fused_nodes, golden_of, make_feeds, precision_ok, run_ort

import lowering
from contracts.fused_ops import DOMAIN, OP_SPECS

SL1_CASES = {
    "where-mean": (dict(), dict(sigma=0.5, reduction="mean", scale=1.0)),
    "where-mean-const-node-beta": (dict(beta_const_node=True), dict(sigma=0.5, reduction="mean")),
    "where-sum": (dict(reduction="sum"), dict(sigma=0.5, reduction="sum", scale=1.0)),
    "where-none-full-dout": (dict(reduction="none", dout_shape="full"), dict(reduction="none", scale=1.0)),
    "where-dout-shape1": (dict(reduction="sum", dout_shape=(1,)), dict(reduction="sum")),
    "where-beta1-div-dropped": (dict(beta=1.0), dict(sigma=1.0, reduction="mean")),
    "where-beta2": (dict(beta=2.0, reduction="sum"), dict(sigma=2.0)),
    "where-beta0": (dict(beta=0.0, reduction="sum"), dict(sigma=0.0)),
    "where-le": (dict(form="where_le"), dict(sigma=0.5, reduction="mean")),
    "where-ge-flipped": (dict(form="where_ge"), dict(sigma=0.5)),
    "where-not": (dict(form="where_not"), dict(sigma=0.5)),
    "order1": (dict(order=1), dict(sigma=0.5, reduction="mean")),
    "order2-div-first": (dict(order=2), dict(sigma=0.5, reduction="mean")),
    "order3-reciprocal-beta": (dict(order=3), dict(sigma=0.5, reduction="mean")),
    "tf2onnx-select": (dict(form="tf2onnx"), dict(sigma=0.5, reduction="mean")),
    "mask-complementary-compare": (dict(form="mask_ge"), dict(sigma=0.5, reduction="mean")),
    "mask-one-minus": (dict(form="mask_one_minus"), dict(sigma=0.5, reduction="mean")),
    "clip": (dict(form="clip"), dict(sigma=0.5, reduction="mean")),
    "clip-beta1": (dict(form="clip", beta=1.0), dict(sigma=1.0)),
    "clip-opset10-attrs": (dict(form="clip", opset=10), dict(sigma=0.5)),
    "sign-min": (dict(form="sign-min"), dict(sigma=0.5, reduction="mean")),
    "sign-min-ones-like-sum": (dict(form="sign-min-ones-like", beta=2.0, reduction="sum"),
                               dict(sigma=2.0, reduction="sum")),
    "sign-min-fp16-cast-wrapped": (dict(form="sign-min", dtype=H, cast_wrapped=True), dict(sigma=0.5)),
    "clip-delta-huber": (dict(form="clip-delta", beta=2.0), dict(sigma=2.0, reduction="mean", scale=2.0)),
    "clip-delta-huber-sum": (dict(form="clip-delta", beta=0.5, reduction="sum"),
                             dict(sigma=0.5, reduction="sum", scale=0.5)),
    "minmax-delta-huber": (dict(form="minmax-delta", beta=1.5), dict(sigma=1.5, reduction="mean", scale=1.5)),
    "clip-delta-fp16-cast-wrapped": (dict(form="clip-delta", beta=2.0, dtype=H, cast_wrapped=True), dict(sigma=2.0)),
    "huber": (dict(form="huber", beta=0.7), dict(sigma=0.7, reduction="mean", scale=0.7)),
    "huber-swapped": (dict(form="huber_swapped", beta=1.5, reduction="sum"),
                      dict(sigma=1.5, reduction="sum", scale=1.5)),
    "dynamic-mean-size": (dict(dynamic=True), dict(sigma=0.5, reduction="mean", scale=1.0)),
    "dynamic-mean-reciprocal": (dict(dynamic=True, order=1), dict(reduction="mean")),
    "fp16-cast-wrapped": (dict(dtype=H, cast_wrapped=True), dict(sigma=0.5, reduction="mean")),
    "bf16-cast-wrapped": (dict(dtype=BF, cast_wrapped=True), dict(sigma=0.5, reduction="mean")),
    "fp16-native": (dict(dtype=H), dict(sigma=0.5, reduction="mean")),
    "opset11": (dict(opset=11), dict(sigma=0.5)),
    "opset9": (dict(opset=9, reduction="sum"), dict(sigma=0.5)),
}

PGD_CASES = {
    "max-const": (dict(), "folded"),
    "relu": (dict(clamp="relu"), "folded"),
    "clip-input": (dict(clamp="clip"), "folded"),
    "clip-attr-opset10": (dict(clamp="clip", opset=10), "folded"),
    "add-neg-lr": (dict(update="add_neg"), "folded"),
    "raw-runtime-0d": (dict(scalars="raw"), "raw"),
    "raw-runtime-shape1": (dict(scalars="raw", scalar_shape=(1,)), "raw"),
    "raw-add-neg": (dict(scalars="raw", update="add_neg"), "raw"),
    "folded-runtime": (dict(scalars="folded"), "folded"),
    "folded-reciprocal-runtime": (dict(scalars="folded", scaling="recip"), "folded"),
    "no-l2": (dict(scaling="none"), "folded_reciprocal"),
    "softshrink": (dict(shrink="softshrink"), "folded"),
    "softshrink-runtime": (dict(shrink="softshrink", scalars="raw"), "raw"),
    "relu-difference": (dict(shrink="relu-diff"), "folded"),
    "relu-difference-max-no-l2": (dict(shrink="relu-diff-max", scaling="none"), "folded_reciprocal"),
    "relu-difference-neg-sum": (dict(shrink="relu-diff-neg-sum"), "folded"),
    "relu-difference-fp16-cast-wrapped": (dict(shrink="relu-diff", dtype=H, cast_wrapped=True), "folded"),
    "masked-softshrink": (dict(shrink="masked"), "folded"),
    "masked-softshrink-ge-runtime": (dict(shrink="masked-ge", scalars="raw"), "raw"),
    "masked-softshrink-fp16-native": (dict(shrink="masked", dtype=H), "folded"),
    "clamp-residual": (dict(shrink="residual"), "folded"),
    "clamp-residual-attrs-opset10": (dict(shrink="residual", opset=10), "folded"),
    "clamp-residual-min-max": (dict(shrink="residual-minmax"), "folded"),
    "clamp-residual-max-min-no-l2": (dict(shrink="residual-maxmin", scaling="none"), "folded_reciprocal"),
    "clamp-residual-fp16-cast-wrapped": (dict(shrink="residual", dtype=H, cast_wrapped=True), "folded"),
    "clamp-residual-fp16-native": (dict(shrink="residual", dtype=H), "folded"),
    "min-residual": (dict(shrink="min-residual"), "folded"),
    "min-residual-runtime": (dict(shrink="min-residual", scalars="raw"), "raw"),
    "abs-minus-min-no-l2": (dict(shrink="abs-minus-min", scaling="none"), "folded_reciprocal"),
    "abs-minus-min-fp16-cast-wrapped": (dict(shrink="abs-minus-min", dtype=H, cast_wrapped=True), "folded"),
    "nested-where": (dict(shrink="nested-where"), "folded"),
    "nested-where-no-l2": (dict(shrink="nested-where", scaling="none"), "folded_reciprocal"),
    "fp16-cast-wrapped": (dict(dtype=H, cast_wrapped=True), "folded"),
    "bf16-cast-wrapped": (dict(dtype=BF, cast_wrapped=True, scalars="raw"), "raw"),
    "fp16-native": (dict(dtype=H), "folded"),
}


def _check_structure(fused: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    onnx.checker.check_model(fused, full_check=True)
    nodes = fused_nodes(fused)
    assert [n.op_type for n in nodes] == [op_type]
    node = nodes[0]
    assert len(node.input) == len(OP_SPECS[op_type].inputs)
    assert any(o.domain == DOMAIN for o in fused.opset_import)
    assert [(f.domain, f.name, f.overload) for f in fused.functions] == [(DOMAIN, op_type, node.overload)]
    return node


def _attrs(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _numerics(model: onnx.ModelProto, fused: onnx.ModelProto, edges, nonfinite: bool, rng: np.random.Generator) -> None:
    feeds = make_feeds(model, rng, edges=edges, nonfinite=nonfinite)
    assert_runs_as_fused(model, fused, feeds)


@pytest.mark.parametrize("case", sorted(SL1_CASES))
def test_smooth_l1_forms_fuse(case: str, rng: np.random.Generator) -> None:
    kwargs, expected = SL1_CASES[case]
    model = sl1(**kwargs)
    fused, report = lowering.fuse(model)
    node = _check_structure(fused, SL1)
    attrs = _attrs(node)
    for key, value in expected.items():
        if isinstance(value, str):
            assert attrs[key] == value, (key, attrs)
        else:
            assert attrs[key] == pytest.approx(value, rel=1e-6), (key, attrs)
    assert report.fusions[0].output == model.graph.output[0].name
    assert fused.graph.output[0] == model.graph.output[0]
    native_half = kwargs.get("dtype") in (H, BF) and not kwargs.get("cast_wrapped")
    if kwargs.get("dtype") == BF and native_half:
        return  # onnxruntime has no bfloat16 CPU kernels for these ops
    beta = kwargs.get("beta", 0.5)
    nonfinite = kwargs.get("form") not in ("tf2onnx", "mask_ge", "mask_one_minus") and not native_half
    _numerics(model, fused, edges=(beta,), nonfinite=nonfinite, rng=rng)


@pytest.mark.parametrize("case", sorted(PGD_CASES))
def test_proximal_forms_fuse(case: str, rng: np.random.Generator) -> None:
    kwargs, scalar_form = PGD_CASES[case]
    model = pgd(**kwargs)
    fused, _ = lowering.fuse(model)
    node = _check_structure(fused, PGD)
    assert _attrs(node)["scalar_form"] == scalar_form
    # var = +-threshold hits the clamp exactly only where the threshold is representable
    edges = (0.1 * 0.05,) if kwargs.get("dtype", F) == F else ()
    _numerics(model, fused, edges=edges, nonfinite=True, rng=rng)
    if kwargs.get("clamp") == "clip":  # Clip without max: inf maps to the dtype's largest finite value
        assert _attrs(node)["shrink_max"] == float(np.finfo(np.float16 if kwargs.get("dtype") == H else np.float32).max)


@pytest.mark.parametrize("dtype", [F, H])
def test_smooth_l1_fp16_extremes(dtype: int, rng: np.random.Generator) -> None:
    model = sl1(dtype=H, cast_wrapped=True, reduction="sum", beta=1.0)
    fused, _ = lowering.fuse(model)
    node = fused_nodes(fused)[0]
    feeds = make_feeds(model, rng)
    feeds["predict"].reshape(-1)[:4] = np.array([65504, -65504, 6e-8, -6e-8], np.float16)
    feeds["dout"][...] = np.float16(60000)
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    ok, detail = precision_ok(before, golden_of(fused, node, feeds).astype(np.float16), np.float16)
    assert ok, detail
