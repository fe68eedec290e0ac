"""Proximal-update spellings that exporters write for user code: zeros built from a shape, the
clamp as F.threshold's Where, sign(p) computed in float32 for a half p or written as a Where,
softshrink in its Where, nested-Where, float-mask, ReLU-difference and Min-residual forms, one-element
parameters, and steps that are shared or scale a clipped gradient.

Each fuses (or is refused with its reason) as its semantics demand: the fused model computes what
the unfused one does, NaN and inf included, and the fused node's contract formula agrees with it
(onnx.reference for bfloat16, which onnxruntime's CPU provider cannot run).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from pass_forms import NP, PGD, assert_not_fused, const_node, const_tensor, fuse_checked, graph_model, pgd
from pass_numerics import (
    assert_fuses_once,
    assert_runs_as_fused,
    assert_same,
    assert_same_outputs,
    fused_nodes,
    golden_of,
    intermediates,
    normal_feeds,
    precision_ok,
    rounding_bound_ok,
    run_ort,
)

import lowering

N = 16


# ------------------------------------------------- the clamp max(|p| - t, 0) and its zeros

def _prox_clamped_by(zero: list, zero_name: str, extra_inputs: dict | None = None) -> onnx.ModelProto:
    """sign(p) * Max(|p| - t, zero) / k with p = var - lr*delta and a zero the test supplies."""
    nodes = [
        h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
        h.make_node("Abs", ["p"], ["ap"]), const_node("t", 0.01), h.make_node("Sub", ["ap", "t"], ["d"]), *zero,
        h.make_node("Max", ["d", zero_name], ["clamp"]), h.make_node("Sign", ["p"], ["s"]),
        h.make_node("Mul", ["s", "clamp"], ["u"]), const_node("k", 1.01), h.make_node("Div", ["u", "k"], ["var_out"]),
    ]
    inputs = {"var": (T.FLOAT, (N,)), "delta": (T.FLOAT, (N,)), "lr": (T.FLOAT, ()), **(extra_inputs or {})}
    return graph_model(nodes, inputs, {"var_out": (T.FLOAT, None)})


def test_zeros_like_as_expand_fuses(rng: np.random.Generator) -> None:
    zero = [const_node("z0", 0.0), h.make_node("Shape", ["p"], ["shape"]),
            h.make_node("Expand", ["z0", "shape"], ["zeros"])]
    model = _prox_clamped_by(zero, "zeros")
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    feeds = normal_feeds(model, rng)
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])


@pytest.mark.parametrize("zero_kind", ["expand-to-other-shape", "constant-of-larger-shape"])
def test_zeros_that_broadcast_the_update_are_not_a_clamp(zero_kind: str) -> None:
    if zero_kind == "expand-to-other-shape":
        zero = [const_node("z0", 0.0), h.make_node("Shape", ["other"], ["shape"]),
                h.make_node("Expand", ["z0", "shape"], ["zeros"])]
        model = _prox_clamped_by(zero, "zeros", {"other": (T.FLOAT, (3, N))})
    else:
        model = _prox_clamped_by([const_node("zeros", 0.0, shape=(3, N))], "zeros")
    _, report = fuse_checked(model)
    assert not report.fusions, report.summary()


# ------------------------------------------------- the clamp and sign(p), spelled otherwise

LR, T1, K = 0.125, 0.0625, 1.03125  # exact in every dtype, so no rounding hides a wrong scalar


def _prox_clamp_and_sign(dtype: int, clamp: list[onnx.NodeProto], sign: list[onnx.NodeProto],
                         extra_inits: tuple[onnx.TensorProto, ...] = ()) -> onnx.ModelProto:
    """var_out = sign * clamp / K, p = var - LR * delta; `clamp` computes "m" from "d" = |p| - T1,
    `sign` computes "s" from "p"."""
    nodes = [h.make_node("Mul", ["delta", "lr"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sub", ["ap", "t"], ["d"]), *clamp, *sign,
             h.make_node("Mul", ["s", "m"], ["sm"]), h.make_node("Div", ["sm", "k"], ["var_out"])]
    inits = [const_tensor("lr", LR, dtype), const_tensor("t", T1, dtype), const_tensor("k", K, dtype),
             const_tensor("zero", 0.0, dtype), *extra_inits]
    return graph_model(nodes, {"var": (dtype, (N,)), "delta": (dtype, (N,))}, {"var_out": (dtype, (N,))}, inits,
                       opset=20, name="prox")


SIGN = [h.make_node("Sign", ["p"], ["s"])]


def _where_clamp(relation: str) -> list[onnx.NodeProto]:
    """F.threshold(d, 0, 0) is Where(d <= 0, 0, d); the other relations are its relatives."""
    low = relation in ("LessOrEqual", "Less")
    return [h.make_node(relation, ["d", "zero"], ["c"]),
            h.make_node("Where", ["c", "zero", "d"] if low else ["c", "d", "zero"], ["m"])]


def _widened_sign(dtype: int) -> list[onnx.NodeProto]:
    """torch.sgn of a float16/bfloat16 tensor from the dynamo exporter: Sign in float32 between Casts."""
    return [h.make_node("Cast", ["p"], ["pf"], to=T.FLOAT), h.make_node("Sign", ["pf"], ["sf"]),
            h.make_node("Cast", ["sf"], ["s"], to=dtype)]


def _clamp_and_sign_feeds(dtype: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    var = rng.standard_normal(N).astype(np.float32)
    var[:6] = [0.0, -0.0, np.nan, np.inf, -np.inf, LR * 0.5]  # NaN, infinities, zero, near the threshold
    return {"var": var.astype(NP[dtype]), "delta": rng.standard_normal(N).astype(np.float32).astype(NP[dtype])}


@pytest.mark.parametrize("relation", ["LessOrEqual", "Less"])
def test_threshold_clamp_fuses(relation: str, rng: np.random.Generator) -> None:
    model = _prox_clamp_and_sign(T.FLOAT, _where_clamp(relation), SIGN)
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    assert report.fusions[0].pattern == "proximal_gd/where"
    assert_runs_as_fused(model, fused, _clamp_and_sign_feeds(T.FLOAT, rng))


@pytest.mark.parametrize("relation", ["Greater", "GreaterOrEqual"])
def test_where_clamp_that_sends_nan_to_zero_is_refused_by_the_patterns(relation: str,
                                                                       rng: np.random.Generator) -> None:
    model = _prox_clamp_and_sign(T.FLOAT, _where_clamp(relation), SIGN)
    fused, report = lowering.fuse(model, by_meaning=False)
    assert not fused_nodes(fused)
    assert any("NaN in d gives 0" in r.reason for r in report.rejections), report.rejections
    # the whole update still gives NaN there (sign(NaN) * 0), so the recogniser proves it the contract
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    assert_runs_as_fused(model, fused, _clamp_and_sign_feeds(T.FLOAT, rng))


def test_where_clamp_with_a_nonzero_floor_is_not_a_clamp() -> None:
    clamp = [h.make_node("LessOrEqual", ["d", "floor"], ["c"]), h.make_node("Where", ["c", "zero", "d"], ["m"])]
    fused, _ = fuse_checked(_prox_clamp_and_sign(T.FLOAT, clamp, SIGN, (const_tensor("floor", 0.5),)))
    assert not fused_nodes(fused)


def test_float16_sign_computed_in_float32_fuses(rng: np.random.Generator) -> None:
    model = _prox_clamp_and_sign(T.FLOAT16, [h.make_node("Max", ["d", "zero"], ["m"])], _widened_sign(T.FLOAT16))
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    assert not report.fusions[0].caveats  # Sign runs in float32: NaN stays NaN in the graph too
    assert_runs_as_fused(model, fused, _clamp_and_sign_feeds(T.FLOAT16, rng))


def test_bfloat16_sign_computed_in_float32_fuses(rng: np.random.Generator) -> None:
    model = _prox_clamp_and_sign(T.BFLOAT16, [h.make_node("Max", ["d", "zero"], ["m"])], _widened_sign(T.BFLOAT16))
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    feeds = _clamp_and_sign_feeds(T.BFLOAT16, rng)
    before, = ReferenceEvaluator(model).run(None, feeds)
    after, = ReferenceEvaluator(fused).run(None, feeds)
    assert_same(before, after)


def test_sign_of_a_narrowed_value_is_not_sign_of_p(rng: np.random.Generator) -> None:
    """Sign(Cast<float16>(p)) is 0 where p underflows float16: not sign(p), so the patterns do not
    fuse it. There |p| is far below the threshold and the clamp is 0, so the update as a whole is
    the contract, and the recogniser fuses it."""
    sign = [h.make_node("Cast", ["p"], ["ph"], to=T.FLOAT16), h.make_node("Sign", ["ph"], ["sh"]),
            h.make_node("Cast", ["sh"], ["s"], to=T.FLOAT)]
    model = _prox_clamp_and_sign(T.FLOAT, [h.make_node("Max", ["d", "zero"], ["m"])], sign)
    fused, _ = lowering.fuse(model, by_meaning=False)
    assert not fused_nodes(fused)
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    assert_runs_as_fused(model, fused, _clamp_and_sign_feeds(T.FLOAT, rng))


def test_sign_written_as_a_where_fuses_only_with_a_constant_threshold() -> None:
    # torch.where(p >= 0, 1., -1.) * clamp(|p| - t, min=0): +1 at p = 0, where the clamp is 0 when t >= 0
    model = pgd(shrink="where-sign")
    fused, report = lowering.fuse(model)
    assert report.counts() == {PGD: 1}, report.summary()
    feeds = {"var": np.array([0.005, -0.005, 0.0, -0.0, np.nan, np.inf, -0.3, 0.7, 1.0, -1.0, 0.01, 0.2],
                             np.float32).reshape(3, 4), "delta": np.zeros((3, 4), np.float32)}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(model, feeds)[0], golden_of(fused, fused_nodes(fused)[0], feeds), np.float32)
    assert ok, detail
    assert_not_fused(pgd(shrink="where-sign", scalars="raw"), "constant t >= 0")


# ------------------------------------------------- softshrink with a Cast-widened compare

def _softshrink_widened(else_branch: list, else_name: str, shift: onnx.NodeProto, dtype: int = T.FLOAT
                        ) -> onnx.ModelProto:
    """Where(Cast<float32>(|p|) > 0.05, p - sign(p)*shift, else) / 1.03125, p = var - lr*delta."""
    nodes = [
        h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
        h.make_node("Abs", ["p"], ["ap"]), h.make_node("Cast", ["ap"], ["apf"], to=T.FLOAT), const_node("t", 0.05),
        h.make_node("Greater", ["apf", "t"], ["gt"]), h.make_node("Sign", ["p"], ["s"]), shift,
        h.make_node("Mul", ["s", "shift"], ["ts"]), h.make_node("Sub", ["p", "ts"], ["moved"]), *else_branch,
        h.make_node("Where", ["gt", "moved", else_name], ["w"]), const_node("k", 1.0, dtype),
        const_node("k2", 1.03125, dtype), h.make_node("Div", ["w", "k2"], ["var_out"]),
    ]
    return graph_model(nodes, {"var": (dtype, (N,)), "delta": (dtype, (N,)), "lr": (dtype, ())},
                       {"var_out": (dtype, None)})


def test_softshrink_with_zeros_instead_of_p_times_0_fuses_as_nan_to_zero() -> None:
    # NaN in p gives 0 there: the op's nan_to_zero variant, exactly
    model = _softshrink_widened([const_node("zeros", 0.0, shape=(N,))], "zeros", const_node("shift", 0.05))
    _, report = fuse_checked(model)
    assert [f.attributes["nonfinite"] for f in report.fusions] == ["nan_to_zero"], report.summary()


def test_softshrink_shifting_by_another_threshold_is_refused_with_its_reason() -> None:
    # float16 graph: compares |p| with 0.05 in float32 but shifts p by 0.0625; for |p| between
    # them the graph gives a negative magnitude, so near |p| == t it is no shrink
    times_zero = [const_node("zero", 0.0, T.FLOAT16), h.make_node("Mul", ["p", "zero"], ["p0"])]
    model = _softshrink_widened(times_zero, "p0", const_node("shift", 0.0625, T.FLOAT16), T.FLOAT16)
    _, report = fuse_checked(model)
    assert not report.fusions
    assert any("shifts p by" in r.reason for r in report.rejections), report.summary()
    exact = _softshrink_widened(times_zero, "p0", const_node("shift", 0.0625, T.FLOAT16), T.FLOAT16)
    exact.graph.node[4].CopyFrom(const_node("t", 0.0625))
    _, report = fuse_checked(exact)
    assert report.counts() == {PGD: 1}, report.summary()


def test_softshrink_shifting_by_the_threshold_rounded_to_float16_fuses(rng: np.random.Generator) -> None:
    # torch's softshrink on a half tensor: compares |p| (widened) with 0.05 in float32 and shifts
    # by 0.05 rounded to float16 (0.049988); no float16 lies between the two, so the graph is the
    # shrink at the rounded threshold, which the fused node takes
    times_zero = [const_node("zero", 0.0, T.FLOAT16), h.make_node("Mul", ["p", "zero"], ["p0"])]
    model = _softshrink_widened(times_zero, "p0", const_node("shift", 0.05, T.FLOAT16), T.FLOAT16)
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    node, = fused_nodes(fused)
    feeds = normal_feeds(model, rng)
    rounded = np.float16(0.05)
    above = np.nextafter(rounded, np.float16(1))
    feeds["var"][:8] = [rounded, -rounded, above, -above, np.nextafter(rounded, np.float16(0)), np.nan, np.inf, 0.0]
    feeds["lr"] = np.float16(0.0)
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    ok, detail = precision_ok(after, golden_of(fused, node, feeds), np.float16)
    assert ok, detail


def test_float32_softshrink_shifting_by_the_float16_rounded_threshold_is_refused() -> None:
    # the same graph on float32 tensors: |p| between 0.049988 and 0.05 is a float32 value, where
    # the graph gives 0 and the shrink at 0.049988 does not
    shift = float(np.float16(0.05))
    times_zero = [const_node("zero", 0.0), h.make_node("Mul", ["p", "zero"], ["p0"])]
    model = _softshrink_widened(times_zero, "p0", const_node("shift", shift))
    _, report = fuse_checked(model)
    assert not report.fusions, report.summary()


def test_half_softshrink_comparing_a_widened_runtime_threshold_fuses(rng: np.random.Generator) -> None:
    # the dynamo exporter's float16 softshrink with t = lr*l1 at runtime: Greater(Cast<float32>(|p|),
    # Cast<float32>(t)) beside p - sign(p)*t in float16; comparing the widened values is comparing t
    H = T.FLOAT16
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]),
             h.make_node("Mul", ["lr", "l1"], ["t"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Cast", ["ap"], ["apf"], to=T.FLOAT),
             h.make_node("Cast", ["t"], ["tf"], to=T.FLOAT), h.make_node("Greater", ["apf", "tf"], ["big"]),
             h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "t"], ["st"]),
             h.make_node("Sub", ["p", "st"], ["moved"]), h.make_node("Mul", ["p", "zero"], ["p0"]),
             h.make_node("Where", ["big", "moved", "p0"], ["var_out"])]
    model = graph_model(nodes, {"var": (H, (N,)), "delta": (H, (N,)), "lr": (H, ()), "l1": (H, ())},
                        {"var_out": (H, (N,))}, [const_tensor("zero", 0.0, H)])
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    feeds = {"var": rng.standard_normal(N).astype(np.float16), "delta": rng.standard_normal(N).astype(np.float16),
             "lr": np.float16(0.5), "l1": np.float16(0.25)}
    feeds["var"][:4], feeds["delta"][:4] = [0.125, -0.125, np.nan, 0.0], 0.0
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    ok, detail = rounding_bound_ok(fused, fused_nodes(fused)[0], {**feeds, **intermediates(fused, feeds)}, before)
    assert ok, detail


# ------------------------------------------------- shrink forms of p against a threshold t

def _prox_shrink(shrink: list, shrunk: str, t: float = 0.05, runtime_t: bool = False) -> onnx.ModelProto:
    """shrink(p) / 1.25 with p = var - lr*delta; the test's nodes read p and t."""
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]), *shrink,
             const_node("k", 1.25), h.make_node("Div", [shrunk, "k"], ["var_out"])]
    inputs = {"var": (T.FLOAT, (N,)), "delta": (T.FLOAT, (N,)), "lr": (T.FLOAT, ())}
    if runtime_t:
        inputs["t"] = (T.FLOAT, ())
    # an initializer, not a Constant node: the contract's formula reads the fused node's inputs
    constants = [] if runtime_t else [const_tensor("t", t)]
    return graph_model(nodes, inputs, {"var_out": (T.FLOAT, (N,))}, constants)


def _edge_feeds(model: onnx.ModelProto, t: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Small normal values, with var at +-t, just above t, the zeros, NaN, the infinities and 1e30
    where delta is 0."""
    feeds = normal_feeds(model, rng, scale=0.1)
    feeds["var"][:9] = [t, -t, 0.0, -0.0, np.nan, np.inf, -np.inf, np.nextafter(np.float32(t), 1), 1e30]
    feeds["delta"][:9] = 0.0
    feeds["lr"] = np.float32(0.3)
    return feeds


def test_softshrink_with_zeros_where_p_is_small_fuses(rng: np.random.Generator) -> None:
    # torch.where(|p| <= t, zeros, p - sign(p)*t): NaN fails the comparison and takes the shift
    # branch, so it stays NaN as in the fused op (the mirrored Where(|p| > t, ..., 0) does not)
    shrink = [h.make_node("Abs", ["p"], ["ap"]), h.make_node("LessOrEqual", ["ap", "t"], ["small"]),
              h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "t"], ["st"]),
              h.make_node("Sub", ["p", "st"], ["moved"]), const_node("zeros", 0.0, shape=(N,)),
              h.make_node("Where", ["small", "zeros", "moved"], ["shrunk"])]
    model = _prox_shrink(shrink, "shrunk")
    assert_fuses_once(model, PGD, _edge_feeds(model, 0.05, rng))


def _relu_plus_min(first: str = "Relu", second: str = "Min") -> list:
    """relu(p - t) + min(p + t, 0), each clamp in the spelling asked for."""
    nodes = [h.make_node("Sub", ["p", "t"], ["d"]), h.make_node("Add", ["p", "t"], ["e"]), const_node("zero", 0.0)]
    if first == "Relu":
        nodes.append(h.make_node("Relu", ["d"], ["hi"]))
    else:
        nodes.append(h.make_node("Clip", ["d", "zero"], ["hi"]))
    if second == "Min":
        nodes.append(h.make_node("Min", ["e", "zero"], ["lo"]))
    else:
        nodes.append(h.make_node("Clip", ["e", "", "zero"], ["lo"]))
    return nodes + [h.make_node("Add", ["hi", "lo"], ["shrunk"])]


def test_relu_plus_negative_part_fuses(rng: np.random.Generator) -> None:
    # torch.clamp(p - t, min=0) + torch.clamp(p + t, max=0): min(e, 0) is -relu(-e)
    model = _prox_shrink(_relu_plus_min(), "shrunk")
    node = assert_fuses_once(model, PGD, _edge_feeds(model, 0.05, rng))
    assert not any(a.name == "shrink_max" for a in node.attribute)


def test_relu_plus_negative_part_as_clips_keeps_the_clip_bound(rng: np.random.Generator) -> None:
    # TorchScript's clamp(min=0) / clamp(max=0): Clip with a bound left out maps inf to the
    # largest finite value, which the fused node keeps as shrink_max
    model = _prox_shrink(_relu_plus_min("Clip", "Clip"), "shrunk")
    node = assert_fuses_once(model, PGD, _edge_feeds(model, 0.05, rng))
    shrink_max = next(a.f for a in node.attribute if a.name == "shrink_max")
    assert shrink_max == np.finfo(np.float32).max


def test_relu_plus_negative_part_mixing_clip_and_min_is_not_fused() -> None:
    # +inf would map to the largest finite value and -inf stay -inf: no one shrink_max says that
    assert_not_fused(_prox_shrink(_relu_plus_min("Clip", "Min"), "shrunk"))


def test_relu_plus_negative_part_with_a_runtime_or_negative_threshold_is_refused() -> None:
    assert_not_fused(_prox_shrink(_relu_plus_min(), "shrunk", runtime_t=True), "t is a runtime value")
    assert_not_fused(_prox_shrink(_relu_plus_min(), "shrunk", t=-0.05), "for t < 0 it is 2p near 0")


def test_relu_difference_of_clips_fuses(rng: np.random.Generator) -> None:
    # TorchScript's (p - t).clamp(min=0) - (-p - t).clamp(min=0)
    shrink = [h.make_node("Sub", ["p", "t"], ["d"]), h.make_node("Neg", ["p"], ["np"]),
              h.make_node("Sub", ["np", "t"], ["e"]), const_node("zero", 0.0),
              h.make_node("Clip", ["d", "zero"], ["hi"]), h.make_node("Clip", ["e", "zero"], ["lo"]),
              h.make_node("Sub", ["hi", "lo"], ["shrunk"])]
    model = _prox_shrink(shrink, "shrunk")
    node = assert_fuses_once(model, PGD, _edge_feeds(model, 0.05, rng))
    assert any(a.name == "shrink_max" for a in node.attribute)


def test_sign_times_shrunk_magnitude_times_a_float_mask_fuses(rng: np.random.Generator) -> None:
    # torch.sign(p) * (|p| - t) * (|p| > t).float()
    shrink = [h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sign", ["p"], ["s"]),
              h.make_node("Sub", ["ap", "t"], ["d"]), h.make_node("Mul", ["s", "d"], ["sd"]),
              h.make_node("Greater", ["ap", "t"], ["big"]), h.make_node("Cast", ["big"], ["mask"], to=T.FLOAT),
              h.make_node("Mul", ["sd", "mask"], ["shrunk"])]
    model = _prox_shrink(shrink, "shrunk")
    assert_fuses_once(model, PGD, _edge_feeds(model, 0.05, rng))


def test_sign_times_magnitude_shifted_by_another_threshold_is_not_fused() -> None:
    shrink = [h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sign", ["p"], ["s"]), const_node("u", 0.06),
              h.make_node("Sub", ["ap", "u"], ["d"]), h.make_node("Mul", ["s", "d"], ["sd"]),
              h.make_node("Greater", ["ap", "t"], ["big"]), h.make_node("Cast", ["big"], ["mask"], to=T.FLOAT),
              h.make_node("Mul", ["sd", "mask"], ["shrunk"])]
    assert_not_fused(_prox_shrink(shrink, "shrunk"))


# ------------------------------------------------- shrink forms that test both sides, p > t and p < -t

def _prox_two_sided(shrink: list[onnx.NodeProto], shrunk: str, t: float | None = 0.05) -> onnx.ModelProto:
    """shrink(p) / 1.25 with p = var - lr*delta; the nodes read p, t and -t (t None: an input)."""
    nodes = [h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["var", "step"], ["p"]), *shrink,
             h.make_node("Div", [shrunk, "k"], ["var_out"])]
    inputs = {"var": (T.FLOAT, (N,)), "delta": (T.FLOAT, (N,)), "lr": (T.FLOAT, ())}
    constants = [const_tensor("k", 1.25), const_tensor("zero", 0.0)]
    if t is None:
        inputs["t"] = (T.FLOAT, ())
        nodes.insert(0, h.make_node("Neg", ["t"], ["neg_t"]))
    else:
        constants += [const_tensor("t", t), const_tensor("neg_t", -t)]
    return graph_model(nodes, inputs, {"var_out": (T.FLOAT, (N,))}, constants)


def _nested(else_branch: str = "p0", outer: str = "Greater") -> list[onnx.NodeProto]:
    """Where(p > t, p - t, Where(p < -t, p + t, p*0)), or the low side tested first."""
    high = [h.make_node("Greater", ["p", "t"], ["hi"]), h.make_node("Sub", ["p", "t"], ["moved_down"])]
    low = [h.make_node("Less", ["p", "neg_t"], ["lo"]), h.make_node("Add", ["p", "t"], ["moved_up"])]
    zero = [h.make_node("Mul", ["p", "zero"], ["p0"])]
    if outer == "Greater":
        selects = [h.make_node("Where", ["lo", "moved_up", else_branch], ["inner"]),
                   h.make_node("Where", ["hi", "moved_down", "inner"], ["shrunk"])]
    else:
        selects = [h.make_node("Where", ["hi", "moved_down", else_branch], ["inner"]),
                   h.make_node("Where", ["lo", "moved_up", "inner"], ["shrunk"])]
    return high + low + zero + selects


def _two_sided_feeds(rng: np.random.Generator, t: float = 0.05) -> dict[str, np.ndarray]:
    feeds = {n: (rng.standard_normal(N) * 0.1).astype(np.float32) for n in ("var", "delta")}
    feeds["var"][:9] = [t, -t, 0.0, -0.0, np.nan, np.inf, -np.inf, np.nextafter(np.float32(t), 1), 1e30]
    feeds["delta"][:9] = 0.0
    feeds["lr"] = np.array(0.3, np.float32)
    return feeds


@pytest.mark.parametrize("outer", ["Greater", "Less"])
def test_nested_where_softshrink_fuses(outer: str, rng: np.random.Generator) -> None:
    # NaN fails both comparisons and ends in p*0 = NaN; +-inf takes a side: the shrink everywhere
    node = assert_fuses_once(_prox_two_sided(_nested(outer=outer), "shrunk"), PGD, _two_sided_feeds(rng))
    assert node.op_type == PGD


def test_nested_where_softshrink_with_a_plain_zero_fuses_as_nan_to_zero() -> None:
    _, report = fuse_checked(_prox_two_sided(_nested(else_branch="zero"), "shrunk"))
    assert [f.attributes["nonfinite"] for f in report.fusions] == ["nan_to_zero"], report.summary()


def test_nested_where_softshrink_with_a_runtime_t_is_refused() -> None:
    assert_not_fused(_prox_two_sided(_nested(), "shrunk", t=None), "only for t >= 0, and t is a runtime value")


def test_nested_where_softshrink_with_a_negative_t_is_refused() -> None:
    assert_not_fused(_prox_two_sided(_nested(), "shrunk", t=-0.05), "for t < 0 the sides overlap")


def test_nested_selects_with_p_plus_p_are_no_softshrink() -> None:
    # where(p > t, p + p, ...): the branch has no shift by t, and the reader must not assume one
    shrink = _nested()
    shrink[1] = h.make_node("Add", ["p", "p"], ["moved_down"])
    assert_not_fused(_prox_two_sided(shrink, "shrunk"))


def test_min_residual_is_the_shrink_for_a_negative_runtime_t(rng: np.random.Generator) -> None:
    # p - sign(p)*min(|p|, t): for t < 0 the Min is t and the result p - sign(p)*t, which is
    # sign(p)*max(|p| - t, 0) too; the fused node reads t as given
    shrink = [h.make_node("Sign", ["p"], ["s"]), h.make_node("Abs", ["p"], ["a"]),
              h.make_node("Min", ["a", "t"], ["capped"]), h.make_node("Mul", ["s", "capped"], ["shift"]),
              h.make_node("Sub", ["p", "shift"], ["shrunk"])]
    model = _prox_two_sided(shrink, "shrunk", t=None)
    for t in (0.05, -0.05, 0.0):
        assert_fuses_once(model, PGD, {**_two_sided_feeds(rng, t), "t": np.array(t, np.float32)})


# ------------------------------------------------- what the update applies to

def _update(v: str, step: str) -> list[onnx.NodeProto]:
    """out_v = sign(p) * max(|p| - t, 0) / k with p = v - step."""
    return [h.make_node("Sub", [v, step], [f"p_{v}"]), h.make_node("Abs", [f"p_{v}"], [f"a_{v}"]),
            h.make_node("Sub", [f"a_{v}", "t"], [f"d_{v}"]), h.make_node("Max", [f"d_{v}", "zero"], [f"m_{v}"]),
            h.make_node("Sign", [f"p_{v}"], [f"s_{v}"]), h.make_node("Mul", [f"s_{v}", f"m_{v}"], [f"sm_{v}"]),
            h.make_node("Div", [f"sm_{v}", "k"], [f"out_{v}"])]


@pytest.mark.parametrize("one_step", [False, True])
def test_two_updates_sharing_their_step_both_fuse(one_step: bool, rng: np.random.Generator) -> None:
    # dynamo without its optimizer writes lr*delta once per update, which normalization merges into
    # one Mul; with its optimizer, or TorchScript, the exporter shares one Mul itself. The Mul
    # stays, and each update reads it as delta, alpha 1
    nodes = [const_node("t", 0.05), const_node("k", 1.25), const_node("zero", 0.0)]
    for v in ("var", "var2"):
        step = "step_var" if one_step else f"step_{v}"
        if not one_step or v == "var":
            nodes += [const_node(f"lr_{v}", 0.1), h.make_node("Mul", ["delta", f"lr_{v}"], [step])]
        nodes += _update(v, step)
    model = graph_model(nodes, {n: (T.FLOAT, (N,)) for n in ("var", "var2", "delta")},
                        {f"out_{v}": (T.FLOAT, (N,)) for v in ("var", "var2")}, name="shared_step")
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 2}, report.summary()
    in_model = {n.name: list(n.input) for n in fused_nodes(fused)}
    assert all(in_model[f.node] == f.inputs for f in report.fusions)
    feeds = normal_feeds(model, rng, scale=0.1)
    feeds["var"][:9] = [0.05, -0.05, 0.0, -0.0, np.nan, np.inf, -np.inf, np.nextafter(np.float32(0.05), 1), 1e30]
    feeds["delta"][:9] = 0.0
    feeds["var2"] = -feeds["var"]
    assert_same_outputs(model, fused, feeds)
    for node, out in zip(fused_nodes(fused), run_ort(fused, feeds)):
        ok, detail = precision_ok(out, golden_of(fused, node, {**feeds, **intermediates(fused, feeds)}), np.float32)
        assert ok, detail


def test_update_of_a_one_element_parameter_fuses() -> None:
    # Linear(d, 1).bias has shape [1]; a 0-D parameter too: delta is the factor shaped like var,
    # also when a runtime lr of shape [1] stands beside it
    for shape, runtime_lr in (((1,), False), ((), False), ((1,), True)):
        nodes = [const_node("zero", 0.0), h.make_node("Mul", ["delta", "lr"], ["step"]),
                 h.make_node("Sub", ["var", "step"], ["p"]),
                 h.make_node("Abs", ["p"], ["ap"]), h.make_node("Sub", ["ap", "t"], ["d"]),
                 h.make_node("Max", ["d", "zero"], ["m"]), h.make_node("Sign", ["p"], ["s"]),
                 h.make_node("Mul", ["s", "m"], ["sm"]), h.make_node("Div", ["sm", "k"], ["var_out"])]
        inputs = {"var": (T.FLOAT, shape), "delta": (T.FLOAT, shape)}
        if runtime_lr:
            inputs["lr"] = (T.FLOAT, (1,))
        constants = [const_tensor("t", 0.05),
                     const_tensor("k", 1.25)] + ([] if runtime_lr else [const_tensor("lr", 0.3)])
        model = graph_model(nodes, inputs, {"var_out": (T.FLOAT, shape)}, constants, name="bias")
        fused, report = fuse_checked(model)
        assert report.counts() == {PGD: 1}, (shape, runtime_lr, report.summary())
        node, = fused_nodes(fused)
        assert node.input[0] == "var" and node.input[4] in ("delta", "lr")
        for value in (0.05, -0.05, 0.0, np.nan, np.inf, 0.7):
            feeds = {"var": np.full(shape, value, np.float32), "delta": np.full(shape, 0.25, np.float32)}
            if runtime_lr:
                feeds["lr"] = np.full((1,), 0.3, np.float32)
            before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
            assert_same(before, after)
            ok, detail = precision_ok(before, golden_of(fused, node, feeds), np.float32)
            assert ok, detail


def test_update_of_a_clipped_gradient_takes_the_clipped_gradient_as_delta(rng: np.random.Generator) -> None:
    # clip_grad_norm then the step: var - 0.1 * (grad * coef), coef a runtime 0-D scale
    nodes = [const_node("lr", 0.1), const_node("zero", 0.0), const_node("k", 1.25), const_node("t", 0.05),
             h.make_node("Mul", ["grad", "coef"], ["clipped"]), h.make_node("Mul", ["clipped", "lr"], ["step"]),
             h.make_node("Sub", ["var", "step"], ["p"]), h.make_node("Abs", ["p"], ["ap"]),
             h.make_node("Sub", ["ap", "t"], ["d"]), h.make_node("Max", ["d", "zero"], ["m"]),
             h.make_node("Sign", ["p"], ["s"]), h.make_node("Mul", ["s", "m"], ["sm"]),
             h.make_node("Div", ["sm", "k"], ["var_out"])]
    model = graph_model(nodes, {"var": (T.FLOAT, (N,)), "grad": (T.FLOAT, (N,)), "coef": (T.FLOAT, ())},
                        {"var_out": (T.FLOAT, (N,))}, name="clipped")
    fused, report = fuse_checked(model)
    assert report.counts() == {PGD: 1}, report.summary()
    node, = fused_nodes(fused)
    assert node.input[4] == "clipped"
    alpha = next(t for t in fused.graph.initializer if t.name == node.input[1])
    assert float(numpy_helper.to_array(alpha)) == np.float32(0.1)
    feeds = {"var": rng.standard_normal(N).astype(np.float32), "grad": rng.standard_normal(N).astype(np.float32),
             "coef": np.float32(0.7)}
    assert_same(run_ort(model, feeds)[0], run_ort(fused, feeds)[0])
    ok, detail = precision_ok(run_ort(model, feeds)[0],
                              golden_of(fused, node, {**feeds, **intermediates(fused, feeds)}),
                              np.float32)
    assert ok, detail
