"""The contract of the fused nodes: what the graph pass emits and what codegen/runtime implement.

Every later stage (kernel lowering, the CPU backend, the diff) reads the fused node through this
module only, so the meaning of each input and attribute is defined once, here, together with a
float64 numpy reference that tests and the diff use as the golden.

SmoothL1LossGradV2(predict, label, dout) -> gradient
    attrs: sigma (float >= 0, PyTorch's beta), reduction ("none" | "mean" | "sum"),
           scale (float, default 1.0: a constant factor the graph applied on top, e.g. Huber's delta)
    x = predict - label
    s = x / sigma            where |x| < sigma
        sign(x)              elsewhere (sign(+-0) = 0); NaN in x gives NaN
    gradient = scale * norm * dout * s,  norm = 1/numel(predict) for "mean", else 1
    predict and label have one shape; dout has that shape or exactly one element.

ApplyProximalGradientDescent(var, alpha, l1, l2, delta) -> var_out
    attrs: scalar_form ("raw" | "folded" | "folded_reciprocal")
      raw:               threshold = alpha * l1, divisor = 1 + alpha * l2
      folded:            threshold = l1,         divisor = l2
      folded_reciprocal: threshold = l1,         divisor = 1 / l2
           shrink_max (float, default +inf): ONNX Clip(x, min=0) without max clamps at the
           largest finite value of its dtype, so a graph written with it maps +-inf to
           +-that value; the attribute carries it
    prox = var - alpha * delta
    var_out = sign(prox) * min(max(|prox| - threshold, 0), shrink_max) / divisor
              (sign(0) = 0; NaN propagates)
    alpha, l1, l2 hold one element each (0-D or [1]); var and delta share one shape.

Tensors are float32, float16 or bfloat16 (one dtype per node for the tensor inputs; the scalars of
ApplyProximalGradientDescent are that dtype or float32). Compute is float32 with one rounding to
the output dtype (round to nearest even).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DOMAIN = "com.huawei.ascend"
DOMAIN_VERSION = 1

SMOOTH_L1_GRAD = "SmoothL1LossGradV2"
PROXIMAL_GD = "ApplyProximalGradientDescent"

REDUCTIONS = ("none", "mean", "sum")
SCALAR_FORMS = ("raw", "folded", "folded_reciprocal")


@dataclass(frozen=True)
class OpSpec:
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scalar_inputs: tuple[str, ...]
    attrs: dict[str, object]  # attribute name -> default value


OP_SPECS: dict[str, OpSpec] = {
    SMOOTH_L1_GRAD: OpSpec(
        SMOOTH_L1_GRAD,
        inputs=("predict", "label", "dout"),
        outputs=("gradient",),
        scalar_inputs=(),
        attrs={"sigma": 1.0, "reduction": "mean", "scale": 1.0},
    ),
    PROXIMAL_GD: OpSpec(
        PROXIMAL_GD,
        inputs=("var", "alpha", "l1", "l2", "delta"),
        outputs=("var_out",),
        scalar_inputs=("alpha", "l1", "l2"),
        attrs={"scalar_form": "raw", "shrink_max": float("inf")},
    ),
}


def _sign_keep_nan(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), x, np.sign(x))


def smooth_l1_grad_reference(
    predict: np.ndarray,
    label: np.ndarray,
    dout: np.ndarray,
    sigma: float,
    reduction: str,
    scale: float = 1.0,
) -> np.ndarray:
    """float64 golden of SmoothL1LossGradV2 (result in float64; the caller rounds)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if sigma < 0:
        raise ValueError("sigma must be >= 0")
    p = np.asarray(predict, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = p - np.asarray(label, np.float64)
        inside = np.abs(x) < sigma
        s = np.where(inside, x / (sigma if sigma > 0 else 1.0), _sign_keep_nan(x))
    norm = 1.0 / p.size if reduction == "mean" and p.size else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        return float(scale) * norm * np.asarray(dout, np.float64) * s


def proximal_scalars(alpha: float, l1: float, l2: float, scalar_form: str) -> tuple[float, float]:
    """(threshold, divisor) in float64 for the three scalar forms."""
    if scalar_form == "raw":
        return alpha * l1, 1.0 + alpha * l2
    if scalar_form == "folded":
        return l1, l2
    if scalar_form == "folded_reciprocal":
        with np.errstate(divide="ignore"):
            return l1, float(np.float64(1.0) / np.float64(l2))
    raise ValueError(f"scalar_form must be one of {SCALAR_FORMS}, got {scalar_form!r}")


def proximal_gd_reference(
    var: np.ndarray,
    alpha: float,
    l1: float,
    l2: float,
    delta: np.ndarray,
    scalar_form: str = "raw",
    shrink_max: float = float("inf"),
) -> np.ndarray:
    """float64 golden of ApplyProximalGradientDescent (result in float64; the caller rounds)."""
    a = float(np.asarray(alpha, np.float64).reshape(-1)[0])
    threshold, divisor = proximal_scalars(
        a,
        float(np.asarray(l1, np.float64).reshape(-1)[0]),
        float(np.asarray(l2, np.float64).reshape(-1)[0]),
        scalar_form,
    )
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        prox = np.asarray(var, np.float64) - a * np.asarray(delta, np.float64)
        shrunk = np.minimum(np.maximum(np.abs(prox) - threshold, 0.0), shrink_max)
        shrunk = np.where(np.isnan(prox), prox, shrunk)
        return _sign_keep_nan(prox) * shrunk / divisor
