"""The proof against regions whose difference from the fused op hides where IEEE arithmetic leaves
the reals: a Clip's left-out bound (the largest float32, which a Cast to float16 makes inf), an
overflow inside Shrink or inside a Sum's running sum, an overflow at a non-finite input. Each
region differs from the contract at one input; the pass must not fuse it, and if it does, the
unfused graph (onnxruntime) and the contract's float64 reference differ at that input."""

from __future__ import annotations

import numpy as np
import onnx
from pass_forms import F, G, H
from pass_numerics import fused_nodes, run_ort

import lowering
from contracts.fused_ops import smooth_l1_grad_reference
from lowering.proof import prove

FLOAT_MAX = float(np.finfo(np.float32).max)


def _smooth_l1(g: G, x: str, go: str, sign_of: str | None = None) -> str:
    """PyTorch's decomposition at beta = 0.5, its sign read from `sign_of` when given."""
    cond = g.op("Less", g.op("Abs", x), g.const(0.5))
    linear = g.op("Div", g.op("Mul", go, x), g.const(0.5))
    return g.op("Where", cond, linear, g.op("Mul", go, g.op("Sign", sign_of or x)))


def _negated_where(g: G, x: str, go: str, cond: str, sign_of: str | None = None) -> onnx.ModelProto:
    """The SmoothL1 gradient, negated where `cond` holds."""
    correct = _smooth_l1(g, x, go, sign_of)
    g.output(g.op("Where", cond, g.op("Neg", correct), correct))
    return g.model()


def _fused_value_differs(model: onnx.ModelProto, at: dict[str, float], assume_finite: bool = False) -> str | None:
    """When the pass fuses `model`: how the unfused graph differs from the fused node's contract at
    the input `at` (one element each); None when it does not fuse or they agree."""
    prove.clear_cache()
    fused, report = lowering.fuse(model, assume_finite=assume_finite)
    if not report.fusions:
        return None
    node, = fused_nodes(fused)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    feeds = {k: np.full((3, 4), v, np.float32) for k, v in at.items()}
    graph = run_ort(model, feeds)[0].reshape(-1)[0]
    want = smooth_l1_grad_reference(feeds["predict"], feeds["label"], feeds["dout"], attrs["sigma"],
                                    attrs["reduction"].decode(), attrs["scale"],
                                    attrs.get("nonfinite", b"select").decode()).reshape(-1)[0]
    if np.float32(want) == graph or np.isnan(want) and np.isnan(graph):
        return None
    return f"fused as {attrs}, but at {at} the graph gives {graph}, the fused op {np.float32(want)}"


def _clipped_in_float32(lo: float) -> onnx.ModelProto:
    """x rounded to float16 (+inf from 65520), clipped in float32 at `lo` with no upper bound
    (onnxruntime maps +inf to 3.4e38 there) and cast back: +inf again. The gradient is negated
    where that value exceeds the largest float16 and label > 5: nowhere if the Cast of the clip
    were exact (the clip's bound is no float16) or the clip at lo rounded to float16 (which
    caps at 65504), but at every x >= 65520 in the graph."""
    g = G()
    p, t, go = g.input("predict"), g.input("label"), g.input("dout")
    x = g.op("Sub", p, t)
    widened = g.op("Cast", g.op("Cast", x, to=H), to=F)
    clipped = g.op("Cast", g.op("Cast", g.op("Clip", widened, g.const(lo)), to=H), to=F)
    beyond = g.op("Sub", clipped, g.const(FLOAT_MAX if lo == 0.0 else 65504.0))
    # label > 5: no probe of the recogniser draws one, so only the proof stands between the two
    cond = g.op("And", g.op("Greater", beyond, g.const(1.0)), g.op("Greater", t, g.const(5.0)))
    return _negated_where(g, x, go, cond)


def test_a_float32_clip_without_upper_bound_of_a_float16_value_is_no_float16_value() -> None:
    """The clip at 0 reads a float16 value and a float16 bound, but its left-out bound is not one."""
    assert _fused_value_differs(_clipped_in_float32(0.0), {"predict": 70010.0, "label": 10.0, "dout": 1.0}) is None


def test_a_narrowed_clip_without_upper_bound_keeps_infinity() -> None:
    """Cast<f16>(Clip<f32>(v, -0.003)) is max(v, -0.003 rounded to float16), +inf kept: not a
    float16 Clip, whose left-out bound is 65504."""
    assert _fused_value_differs(_clipped_in_float32(-0.003), {"predict": 70010.0, "label": 10.0, "dout": 1.0}) is None


def _overflow_detected(kind: str) -> onnx.ModelProto:
    """z = x + 3.4e38 * sign(x) in a Shrink, or (x + 3.4e38) - 3.4e38 as one Sum: inf from
    |x| = 2^103 (1e31, far inside float32's range by the overflow question's margin), x itself
    over the reals. The gradient is negated where z is +inf and x is not (and label > 5)."""
    g = G()
    p, t, go = g.input("predict"), g.input("label"), g.input("dout")
    x = g.op("Sub", p, t)
    if kind == "shrink":
        z = g.op("Shrink", x, lambd=0.0, bias=-FLOAT_MAX)
    else:
        z = g.op("Sum", x, g.const(FLOAT_MAX), g.const(-FLOAT_MAX))
    overflowed = g.op("And", g.op("Equal", z, g.const(np.inf)), g.op("Less", x, g.const(np.inf)))
    return _negated_where(g, x, go, g.op("And", overflowed, g.op("Greater", t, g.const(5.0))))


def test_an_overflow_inside_shrink_is_an_overflow() -> None:
    assert _fused_value_differs(_overflow_detected("shrink"), {"predict": 2e31, "label": 10.0, "dout": 1.0}) is None


def test_an_overflow_of_a_running_sum_is_an_overflow() -> None:
    assert _fused_value_differs(_overflow_detected("sum"), {"predict": 2e31, "label": 10.0, "dout": 1.0}) is None


def test_a_difference_at_a_nonfinite_input_where_a_live_value_overflows_is_refused() -> None:
    """The gradient negated where dout is +-inf and |x| > 2^28, while the sign branch reads
    sign(x * 2^100), which overflows from |x| = 2^28: the non-finite question leaves out the
    points where a value the result depends on overflows, and the overflow question asks only
    finite inputs, so no question looks at dout = inf, x = 1e9 (the graph -inf, the op inf)."""
    g = G()
    p, t, go = g.input("predict"), g.input("label"), g.input("dout")
    x = g.op("Sub", p, t)
    scaled = g.op("Mul", x, g.const(2.0**100))
    dout_infinite = g.op("Not", g.op("Equal", g.op("Sub", go, go), g.const(0.0)))
    x_finite = g.op("Equal", g.op("Sub", x, x), g.const(0.0))
    large = g.op("And", x_finite, g.op("Greater", g.op("Abs", x), g.const(2.0**28)))
    model = _negated_where(g, x, go, g.op("And", large, dout_infinite), sign_of=scaled)
    assert _fused_value_differs(model, {"predict": 1e9, "label": 0.0, "dout": np.inf}) is None
