"""Numeric checks shared by the pass tests: random + edge inputs, onnxruntime, the float64 golden."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import lowering
from contracts.fused_ops import (
    DOMAIN,
    PROXIMAL_GD,
    SMOOTH_L1_GRAD,
    proximal_gd_reference,
    proximal_scalars,
    smooth_l1_grad_reference,
)

THRESHOLD = {np.dtype(np.float32): 2.0**-13, np.dtype(np.float16): 2.0**-10, np.dtype(ml_dtypes.bfloat16): 2.0**-7}
SCALAR_INPUTS = {"alpha": 0.1, "l1": 0.05, "l2": 0.2, "threshold": 0.005, "divisor": 1.02}


def assert_same(before: np.ndarray, after: np.ndarray) -> None:
    """Equal element for element, NaN where NaN. bfloat16 is compared through its exact float32
    widening: numpy's testing does not count ml_dtypes' bfloat16 as a float type, so NaN != NaN there."""
    widen = lambda a: a.astype(np.float32) if a.dtype == ml_dtypes.bfloat16 else a  # noqa: E731
    np.testing.assert_array_equal(widen(np.asarray(before)), widen(np.asarray(after)))


def assert_same_outputs(model: onnx.ModelProto, fused: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """Every graph output of the fused model equals the original's, element for element."""
    before, after = run_ort(model, feeds), run_ort(fused, feeds)
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert_same(b, a)


def assert_runs_as_fused(model: onnx.ModelProto, fused: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """The fused model gives what the original does (its one fused node's body is the matched
    subgraph), and that node, whose output is the graph's, meets the precision standard against
    the float64 formula applied to its own inputs and attributes."""
    before, after = run_ort(model, feeds)[0], run_ort(fused, feeds)[0]
    assert_same(before, after)
    node, = fused_nodes(fused)
    ok, detail = precision_ok(before, golden_of(fused, node, feeds), before.dtype)
    assert ok, detail


def assert_fuses_once(model: onnx.ModelProto, op_type: str, feeds: dict[str, np.ndarray]) -> onnx.NodeProto:
    """The model fuses into exactly one `op_type` node, passes the full ONNX checker and runs as
    fused (assert_runs_as_fused); returns the fused node."""
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {op_type: 1}, report.summary()
    assert_runs_as_fused(model, fused, feeds)
    return fused_nodes(fused)[0]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime with graph optimizations off; bfloat16 goes in as OrtValues and comes out
    through an exact Cast to float32, since onnxruntime's numpy bridge has no bfloat16. A 0-D feed
    stays 0-D (numpy.ascontiguousarray would make it [1])."""
    bf16 = onnx.TensorProto.BFLOAT16
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    outputs = list(model_copy.graph.output)
    widened = []
    for i, vi in enumerate(outputs):
        if vi.type.tensor_type.elem_type == bf16:
            name = vi.name + "__as_f32"
            model_copy.graph.node.append(onnx.helper.make_node("Cast", [vi.name], [name], to=onnx.TensorProto.FLOAT))
            model_copy.graph.output[i].name = name
            model_copy.graph.output[i].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            widened.append(i)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model_copy.SerializeToString(), so, providers=["CPUExecutionProvider"])
    values = {
        k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(v.view(np.uint16), bf16)
        if v.dtype == ml_dtypes.bfloat16 else ort.OrtValue.ortvalue_from_numpy(np.require(v, requirements='C'))
        for k, v in feeds.items()
    }
    results = [r.numpy() for r in sess.run_with_ort_values(None, values)]
    return [r.astype(ml_dtypes.bfloat16) if i in widened else r for i, r in enumerate(results)]


def _np_dtype(elem_type: int):
    if elem_type == onnx.TensorProto.BFLOAT16:
        return ml_dtypes.bfloat16
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type)


def make_feeds(model: onnx.ModelProto, rng: np.random.Generator, dims: dict[str, int] | None = None,
               edges: tuple[float, ...] = (), nonfinite: bool = False) -> dict[str, np.ndarray]:
    """Random normal tensors with edges spliced in: 0, -0, +-each edge value, inf/nan if asked.

    Edge values go into inputs named predict/var (with label/delta 0 there), so x = predict - label
    and p = var - alpha*delta hit them exactly. One-element inputs get positive scalars.
    """
    dims = dims or {}
    init_names = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 5) for d in tt.shape.dim]
        dtype = _np_dtype(tt.elem_type)
        if int(np.prod(shape)) == 1:
            value = SCALAR_INPUTS.get(vi.name, float(rng.uniform(0.5, 2.0)))
            feeds[vi.name] = np.full(shape, value, np.float32).astype(dtype)
            continue
        feeds[vi.name] = (rng.standard_normal(shape) * 2).astype(np.float32).astype(dtype)
    specials = [0.0, -0.0] + [s * e for e in edges for s in (1, -1)]
    if nonfinite:
        specials += [np.inf, -np.inf, np.nan]
    for main, partner in (("predict", "label"), ("var", "delta")):
        if main in feeds and feeds[main].size >= len(specials) + 1:
            flat = feeds[main].reshape(-1)
            idx = rng.choice(flat.size, len(specials), replace=False)
            flat[idx] = np.array(specials, np.float32).astype(flat.dtype)
            if partner in feeds and feeds[partner].shape == feeds[main].shape:
                feeds[partner].reshape(-1)[idx] = 0
    return feeds


def normal_feeds(model: onnx.ModelProto, rng: np.random.Generator, scale: float = 2.0) -> dict[str, np.ndarray]:
    """Normal values times `scale` for every graph input (static shapes), in the input's dtype."""
    feeds = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        feeds[vi.name] = (rng.standard_normal(shape) * scale).astype(np.float32).astype(_np_dtype(t.elem_type))
    return feeds


def intermediates(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value the standard nodes of a fused model compute, for the fused nodes' formulas."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [o for n in probe.graph.node if n.domain != DOMAIN for o in n.output]
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    return dict(zip(names, run_ort(probe, feeds)))


def precision_ok(actual: np.ndarray, golden: np.ndarray, dtype) -> tuple[bool, str]:
    """CANN precision standard (runtime/precision.py) plus NaN positions."""
    a = np.asarray(actual, np.float64)
    g = np.asarray(golden, np.float64)
    if a.shape != g.shape:
        return False, f"shape {a.shape} != {g.shape}"
    special = _nonfinite_mismatch(a, g)
    if special:
        return False, special
    ok = np.isfinite(g)
    if not ok.any():
        return True, "no finite elements"
    rel = np.abs(a[ok] - g[ok]) / (np.abs(g[ok]) + 1e-7)
    t = THRESHOLD[np.dtype(dtype)]
    mere, mare = float(rel.mean()), float(rel.max())
    return (mere < t and mare < 10 * t), f"MERE {mere:.3g} MARE {mare:.3g} (T={t:.3g})"


def _nonfinite_mismatch(a: np.ndarray, g: np.ndarray) -> str:
    """Why NaN or inf in `a` (float64) differ from the golden `g`, or "" when they agree."""
    nan_a, nan_g = np.isnan(a), np.isnan(g)
    if not np.array_equal(nan_a, nan_g):
        return f"NaN positions differ at {np.argwhere(nan_a != nan_g)[:5].tolist()}"
    inf_g = np.isinf(g)
    if not np.array_equal(a[inf_g], g[inf_g]):
        return "inf values differ"
    return ""


def rounding_bound_ok(fused: onnx.ModelProto, node: onnx.NodeProto, feeds: dict[str, np.ndarray],
                        actual: np.ndarray) -> tuple[bool, str]:
    """The proximal update of a graph, against the float64 golden, element by element within the
    error the graph's own roundings in actual's dtype allow.

    The precision standard's relative error does not apply to such a graph near the threshold (for
    float16/bfloat16 often, for float32 about once in a thousand random 8x16 draws):
    |p| - t cancels, so the one rounding of alpha*delta in the graph's p becomes an unbounded
    relative error (or a zero on one side only). The update is 1/k-Lipschitz in p and t, so the
    graph's error is bounded absolutely: p = var - alpha*delta rounded twice, t and k rounded once
    (runtime alpha*l1, 1 + alpha*l2), |p| - t and the final division once each, plus the
    dtype's smallest subnormal.
    """
    golden = golden_of(fused, node, feeds)
    a64 = np.asarray(actual, np.float64)
    special = _nonfinite_mismatch(a64, golden)
    if special:
        return False, special
    var, alpha, l1, l2, delta = (np.asarray(_value(fused, feeds, n), np.float64) for n in node.input)
    a = float(alpha.reshape(-1)[0])
    t, k = proximal_scalars(a, float(l1.reshape(-1)[0]), float(l2.reshape(-1)[0]), _attrs(node)["scalar_form"])
    finfo = ml_dtypes.finfo(actual.dtype)
    u = float(finfo.eps) / 2
    bound = 4 * u * (np.abs(var) + np.abs(a * delta) + abs(t)) / abs(k) + 4 * u * np.abs(golden) + float(
        finfo.smallest_subnormal)
    ok = np.isfinite(golden)
    excess = np.abs(a64[ok] - golden[ok]) / bound[ok] if ok.any() else np.zeros(0)
    worst = float(excess.max()) if excess.size else 0.0
    return worst <= 1.0, f"worst error {worst:.3g} of the graph's rounding bound"


def _value(model: onnx.ModelProto, feeds: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name in feeds:
        return feeds[name]
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    raise KeyError(f"{name} is neither a feed nor an initializer")


def golden_of(fused: onnx.ModelProto, node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The contract's float64 formula with the fused node's own inputs and attributes."""
    attrs = _attrs(node)
    args = [_value(fused, feeds, n) for n in node.input]
    if node.op_type == SMOOTH_L1_GRAD:
        return smooth_l1_grad_reference(*args, sigma=attrs["sigma"], reduction=attrs["reduction"], scale=attrs["scale"])
    if node.op_type == PROXIMAL_GD:
        return proximal_gd_reference(*args, scalar_form=attrs["scalar_form"],
                                     shrink_max=attrs.get("shrink_max", np.inf))
    raise AssertionError(node.op_type)


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    """A fused node's attributes, strings decoded."""
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain == DOMAIN]
