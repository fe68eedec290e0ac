"""Generated diff inputs: seeded, edges and exact thresholds, inf/NaN only on request."""

from __future__ import annotations

import numpy as np
import pytest

import lowering
from runtime.inputs import (
    InputError,
    edge_hints,
    generate_inputs,
    model_input_specs,
    parse_shape_options,
    resolve_shapes,
)


def _gen(model, seed=0, nonfinite=False):
    fused, _ = lowering.fuse(model)
    specs = model_input_specs(model)
    return generate_inputs(specs, resolve_shapes(specs, {}), seed, nonfinite, edge_hints(fused))


def test_seeded_and_deterministic(build):
    a, b = _gen(build.smooth_l1_model(), 3), _gen(build.smooth_l1_model(), 3)
    c = _gen(build.smooth_l1_model(), 4)
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    assert not np.array_equal(a["predict"], c["predict"])


def test_edges_and_exact_sigma_threshold(build):
    feeds = _gen(build.smooth_l1_model(beta=0.5))
    p, lab = feeds["predict"].astype(np.float64), feeds["label"].astype(np.float64)
    assert np.any(np.abs(p - lab) == 0.5)  # exactly on the threshold
    assert np.any(p == 0) and np.any(np.signbit(p) & (p == 0)) and np.any(p < 0) and np.abs(p).max() >= 1e29
    assert np.all(np.isfinite(p))


def test_nonfinite_only_when_asked(build):
    feeds = _gen(build.smooth_l1_model(), nonfinite=True)
    p = feeds["predict"]
    assert np.isnan(p).any() and np.isposinf(p).any() and np.isneginf(p).any()


def test_proximal_scalars_are_sane_and_threshold_is_hit(build):
    feeds = _gen(build.prox_model())
    alpha, l1 = float(feeds["alpha"]), float(feeds["l1"])
    assert 0 < alpha <= 1 and l1 >= 0 and float(feeds["l2"]) >= 0
    hit = (feeds["delta"] == 0) & (np.abs(feeds["var"]) == np.float32(alpha * l1))
    assert hit.any()


def test_float16_large_values_do_not_overflow_in_the_dtype(build):
    from onnx import TensorProto as T

    feeds = _gen(build.smooth_l1_model(dtype=T.FLOAT16))
    diff = feeds["predict"].astype(np.float16) - feeds["label"].astype(np.float16)
    assert np.all(np.isfinite(diff))


@pytest.mark.parametrize("item,shape", [("x=2,3", (2, 3)), ("x=2x3", (2, 3)), ("x=", ()), ("a=b=4", (4,))])
def test_parse_shape(item, shape):
    name = item.rpartition("=")[0]
    assert parse_shape_options([item]) == {name: shape}


@pytest.mark.parametrize("item", ["x", "=3", "x=-1", "x=a"])
def test_parse_shape_rejects(item):
    with pytest.raises(InputError):
        parse_shape_options([item])


def test_symbolic_dims_are_shared_and_checked(build):
    specs = model_input_specs(build.smooth_l1_model(shape=(4, 5), dynamic=True))
    shapes = resolve_shapes(specs, {"predict": (8, 5)})
    assert shapes == {"predict": (8, 5), "label": (8, 5), "dout": (8, 5)}
    with pytest.raises(InputError, match="disagrees"):
        resolve_shapes(specs, {"predict": (8, 6)})
    with pytest.raises(InputError, match="dim 'batch'"):
        resolve_shapes(specs, {"predict": (8, 5), "label": (9, 5)})


def test_large_values_only_where_a_fused_node_reads_the_input(build):
    from onnx import TensorProto as T
    from onnx import helper as h

    # predict = exp(z): a 1e30 in z would be inf before the fused node ever sees it
    model = build.smooth_l1_model()
    model.graph.input[0].name = "z"
    model.graph.node.insert(0, h.make_node("Exp", ["z"], ["predict"]))
    assert model.graph.input[0].type.tensor_type.elem_type == T.FLOAT
    for seed in range(4):
        feeds = _gen(model, seed)
        z, lab = feeds["z"], feeds["label"]
        assert np.abs(lab).max() >= 1e29  # read straight by the fused node
        assert np.abs(z).max() < 100 and np.isfinite(np.exp(z.astype(np.float64))).all()
        assert np.any(z == 0) and np.any(np.signbit(z) & (z == 0))  # the other edges are still there
    feeds = _gen(model, nonfinite=True)
    assert np.isnan(feeds["z"]).any() and np.isinf(feeds["z"]).any()  # asked for: everywhere


def test_float32_inputs_cast_to_float16_get_float16_large_values(build):
    from onnx import TensorProto as T
    from onnx import helper as h

    # onnxconverter-common's keep_io_types: float32 graph inputs, Cast to float16 on the way in;
    # a 1e30 would be inf after the Cast, which tests the converter's Cast, not the fusion
    model = build.smooth_l1_model(dtype=T.FLOAT16)
    for vi in model.graph.input:
        model.graph.node.insert(0, h.make_node("Cast", [vi.name + "32"], [vi.name], to=T.FLOAT16))
        vi.name += "32"
        vi.type.tensor_type.elem_type = T.FLOAT
    feeds = _gen(model)
    p = feeds["predict32"]
    assert p.dtype == np.float32 and np.abs(p).max() == 16384.0
    assert np.isfinite(p.astype(np.float16) - feeds["label32"].astype(np.float16)).all()


def test_kinks_are_planted_from_the_narrowed_scalars_and_narrowed_with_their_tensor():
    from contracts.fused_ops import PROXIMAL_GD, proximal_scalars
    from runtime.inputs import EdgeHints, InputSpec, KinkSite
    from runtime.precision import rounded_to

    f32 = np.dtype(np.float32)
    specs = [InputSpec("var", f32, (4096,)), InputSpec("delta", f32, (4096,))]
    specs += [InputSpec(n, f32, ()) for n in ("lr", "l1", "l2")]
    hints = EdgeHints()
    hints.scalars = {"lr": (PROXIMAL_GD, "alpha"), "l1": (PROXIMAL_GD, "l1"), "l2": (PROXIMAL_GD, "l2")}
    hints.kink_sites = [KinkSite(PROXIMAL_GD, {"scalar_form": "raw", "shrink_max": float("inf")},
                                 {"var": "var", "alpha": "lr", "l1": "l1", "l2": "l2", "delta": "delta"})]
    hints.narrowed = {n: "float16" for n in ("var", "delta", "lr", "l1", "l2")}
    for seed in range(40):
        out = generate_inputs(specs, {s.name: s.shape for s in specs}, seed, False, hints)
        alpha, l1, l2 = (float(out[n]) for n in ("lr", "l1", "l2"))
        for name in hints.narrowed:  # every narrowed input holds float16 values
            assert np.array_equal(out[name], rounded_to(out[name], "float16")), seed
        # where delta is 0, the graph's threshold in float16 is the float16 product of its scalars
        threshold, _ = proximal_scalars(alpha, l1, l2, "raw")
        edge = float(rounded_to(np.array([threshold]), "float16")[0])
        planted = out["var"][out["delta"] == 0]
        assert np.count_nonzero(np.abs(planted) == edge) > 0, (seed, threshold, planted[:8])
