"""Regenerate the tf2onnx-made fixtures in tests/fixtures/tf2onnx/ (with their manifest.json).

Every graph here comes out of tf2onnx.convert.from_function on a tf.function with an input
signature, written the way TensorFlow users write the SmoothL1/Huber backward (GradientTape over
Keras or tf.compat.v1 losses, or the gradient by hand) and the proximal gradient descent update, so
the fused-pattern matcher is tested on what tf2onnx really emits (after TensorFlow's grappler and
tf2onnx's own optimizers). The manifest has the format of tests/fixtures/exporters/manifest.json;
its "expected" counts and "attrs" say what should fuse by the semantics of contracts/fused_ops.py,
not what the pass does today. Each fixture is checked right after export with the check_entry() of
tests/lowering/test_fixtures_load.py (onnx.checker, onnxruntime without graph optimizations,
float64 references).

Needs tensorflow (2.21), tf2onnx (1.17), onnx, onnxruntime and pytest (the checker module imports
it), not torch; the project is imported from this checkout, not installed. CI has no TensorFlow,
so the .onnx files and the manifest are committed.
Usage (in a separate environment: python -m venv tfenv && tfenv/bin/pip install tensorflow-cpu==2.21.0
tf2onnx==1.17.0 onnxruntime pytest): tfenv/bin/python models/make_tf_models.py [--show]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# TensorFlow reads this when it is imported; its C++ info/warning lines are noise here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402
from fixture_common import load_checker, ops_histogram, record, render_form  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/tf2onnx")
MANIFEST = REPO / FIXTURES / "manifest.json"

SL1 = "SmoothL1LossGradV2"
PROX = "ApplyProximalGradientDescent"

# Hyperparameters of the proximal updates written with Python floats.
LR, L1, L2 = 0.1, 0.01, 0.05
# Uniform ranges the checker draws these inputs from (the same as the exporter fixtures use).
SCALAR_RANGES = {"lr": (0.05, 0.2), "l1": (0.005, 0.05), "l2": (0.01, 0.1), "go": (0.5, 2.0)}
NP_DTYPES = {"float32": np.float32, "float16": np.float16}
TF_DTYPES = {"float32": tf.float32, "float16": tf.float16}
SL1_SHAPE, PROX_SHAPE = [4, 5], [8, 16]
# The batch size the checker runs the fixtures with an unknown batch dimension with.
RUN_BATCH = 7

Fn = Callable[..., dict[str, tf.Tensor]]


def stored(value: float, dtype: str = "float32") -> float:
    """The value a constant of this dtype really holds, so references use what the graph uses."""
    return float(NP_DTYPES[dtype](value))


def stored_reciprocal(value: float, dtype: str = "float32") -> float:
    """1/value as grappler folds it: the reciprocal of the stored constant, computed in its dtype."""
    np_type = NP_DTYPES[dtype]
    return float(np_type(1) / np_type(value))


def sl1(sigma: float, reduction: str, dout: str | float, scale: float = 1.0) -> dict:
    """One SmoothL1LossGradV2 instance as the manifest lists it: the gradient 'grad' w.r.t. 'p'."""
    return {"op": SL1, "sigma": sigma, "reduction": reduction, "scale": scale,
            "inputs": {"predict": "p", "label": "t", "dout": dout}, "output": "grad"}


def prox(scalar_form: str, alpha: str | float, l1: str | float, l2: str | float, **extra: object) -> dict:
    """One ApplyProximalGradientDescent instance as the manifest lists it: 'var_out' from 'var'."""
    return {"op": PROX, "scalar_form": scalar_form,
            "inputs": {"var": "var", "alpha": alpha, "l1": l1, "l2": l2, "delta": "delta"},
            "output": "var_out", **extra}


def raw_prox() -> dict:
    """The update with lr, l1, l2 as runtime inputs (alpha*l1 and 1 + alpha*l2 in the graph)."""
    return prox("raw", "lr", "l1", "l2")


def const_prox(dtype: str = "float32", **extra: object) -> dict:
    """The update with Python-float hyperparameters: grappler folds lr*l1 and turns the division by
    1 + lr*l2 into a product with its reciprocal, so the graph holds threshold and reciprocal."""
    return prox("folded_reciprocal", stored(LR, dtype), stored(LR * L1, dtype),
                stored_reciprocal(1 + LR * L2, dtype), **extra)


@dataclass
class Case:
    name: str                      # file name under FIXTURES
    fn: Fn                         # the user's function; returns a dict, whose keys name the outputs
    signature: list[tf.TensorSpec]  # named specs: the names become the graph input names
    opset: int
    family: str
    attrs: list[dict]
    notes: str
    dtype: str = "float32"
    not_fused: list[dict] = field(default_factory=list)

    @property
    def file(self) -> str:
        return str(FIXTURES / self.name)

    @property
    def expected(self) -> dict[str, int]:
        return {op: sum(1 for a in self.attrs if a["op"] == op) for op in (SL1, PROX)}

    @property
    def dynamic(self) -> bool:
        return any(None in spec.shape.as_list() for spec in self.signature)


# ----------------------------------------------------------------------------------------------
# The functions users write. SmoothL1 (Huber) backward first: the gradient w.r.t. the prediction.

def keras_huber_grad(reduction: str, delta: float) -> Fn:
    """tf.GradientTape over tf.keras.losses.Huber; a first input go is the tape's output_gradients.

    Keras averages over the last axis first, so its "sum" and "none" (the tape sums a vector
    target) scale by 1/D, and "sum_over_batch_size" by 1/numel.
    """
    loss = tf.keras.losses.Huber(delta=delta, reduction=reduction)

    def fn(*args: tf.Tensor) -> dict[str, tf.Tensor]:
        *go, p, t = args
        with tf.GradientTape() as tape:
            tape.watch(p)
            value = loss(t, p)
        return {"grad": tape.gradient(value, p, output_gradients=go[0] if go else None)}
    return fn


def v1_huber_grad(reduction: str, delta: float) -> Fn:
    """tf.GradientTape over tf.compat.v1.losses.huber_loss (Minimum-based, weights=1.0)."""
    def fn(p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(p)
            value = tf.compat.v1.losses.huber_loss(t, p, delta=delta, reduction=reduction)
        return {"grad": tape.gradient(value, p)}
    return fn


def hand_where_grad(reduction: str, beta: float, compare: str = "lt", return_x: bool = False) -> Fn:
    """tf.where(|x| < beta, x/beta, sign(x)) * dout, dout divided by numel for the mean."""
    def fn(go: tf.Tensor, p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
        x = p - t
        g = go / tf.cast(tf.size(p), p.dtype) if reduction == "mean" else go
        inside = tf.abs(x) < beta if compare == "lt" else tf.abs(x) <= beta
        out = {"grad": tf.where(inside, x / beta, tf.sign(x)) * g}
        return {**out, "x": x} if return_x else out
    return fn


def hand_clip_grad(beta: float, huber: bool = False) -> Fn:
    """tf.clip_by_value(x/beta, -1, 1) * dout, or with `huber` the Huber gradient
    tf.clip_by_value(x, -beta, beta) * dout."""
    def fn(go: tf.Tensor, p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
        if huber:
            return {"grad": tf.clip_by_value(p - t, -beta, beta) * go}
        return {"grad": tf.clip_by_value((p - t) / beta, -1.0, 1.0) * go}
    return fn


# Proximal updates: out = sign(p) * max(|p| - lr*l1, 0) / (1 + lr*l2), p = var - lr*delta.

def hand_mask_grad(form: str) -> Fn:
    """The SmoothL1 gradient (sum, beta 0.5) without tf.where: "two" float masks, "one_minus" a mask
    and 1 - mask, or "sign_min" sign(x) * min(|x|/beta, 1)."""
    def fn(go: tf.Tensor, p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
        x = p - t
        if form == "sign_min":
            return {"grad": tf.sign(x) * tf.minimum(tf.abs(x) / 0.5, 1.0) * go}
        small = tf.cast(tf.abs(x) < 0.5, x.dtype)
        large = tf.cast(tf.abs(x) >= 0.5, x.dtype) if form == "two" else 1 - small
        return {"grad": (small * x / 0.5 + large * tf.sign(x)) * go}
    return fn


def prox_update(clamp: str = "maximum", step: str = "sub", scale: str = "div", scalars: str = "const",
                return_p: bool = False) -> Fn:
    """The update in several spellings.

    clamp: "maximum" (tf.maximum(., 0)), "relu" (tf.nn.relu), "clip" (tf.clip_by_value(., 0,
    dtype max)), "clip_inf" (tf.clip_by_value(., 0, np.inf)), "min_residual" (p - sign(p) *
    tf.minimum(|p|, t), the kernel's own formula), "abs_minus_min" (sign(p) * (|p| - tf.minimum(|p|,
    t))), "nested_where" (tf.where(p > t, p - t, tf.where(p < -t, p + t, 0*p))), "softshrink_0p"
    (tf.where(|p| > t, p - sign(p)*t, 0*p)), "residual" (no sign: ISTA's p - tf.clip_by_value(p, -t, t)),
    "relu_difference" (relu(p - t) - relu(-p - t)), "masked" ((p - t*sign(p)) * cast(|p| > t)); step: "sub"
    (var - lr*delta) or "neg_mul" (var + (-lr)*delta); scale: "div" or
    "recip" (times 1/(1 + lr*l2)) or "none" (l2 = 0); scalars: "const" (Python floats) or "tensor" (lr, l1, l2 inputs).
    """
    def fn(var: tf.Tensor, delta: tf.Tensor, *scalar_inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        lr, l1, l2 = scalar_inputs if scalars == "tensor" else (LR, L1, L2)
        p = var - lr * delta if step == "sub" else var + (-lr) * delta
        shrunk = tf.abs(p) - lr * l1
        if clamp == "maximum":
            shrunk = tf.maximum(shrunk, 0.0)
        elif clamp == "relu":
            shrunk = tf.nn.relu(shrunk)
        elif clamp == "clip":
            shrunk = tf.clip_by_value(shrunk, 0.0, var.dtype.max)
        t = lr * l1
        if clamp == "clip_inf":
            out = tf.sign(p) * tf.clip_by_value(tf.abs(p) - t, 0.0, np.inf)
        elif clamp == "min_residual":
            out = p - tf.sign(p) * tf.minimum(tf.abs(p), t)
        elif clamp == "abs_minus_min":
            out = tf.sign(p) * (tf.abs(p) - tf.minimum(tf.abs(p), t))
        elif clamp == "nested_where":
            out = tf.where(p > t, p - t, tf.where(p < -t, p + t, 0.0 * p))
        elif clamp == "softshrink_0p":
            out = tf.where(tf.abs(p) > t, p - tf.sign(p) * t, 0.0 * p)
        elif clamp == "residual":
            out = p - tf.clip_by_value(p, -t, t)
        elif clamp == "relu_difference":
            out = tf.nn.relu(p - t) - tf.nn.relu(-p - t)
        elif clamp == "masked":
            out = (p - t * tf.sign(p)) * tf.cast(tf.abs(p) > t, p.dtype)
        else:
            out = tf.sign(p) * shrunk
        if scale != "none":
            out = out / (1 + lr * l2) if scale == "div" else out * (1 / (1 + lr * l2))
        return {"var_out": out, "p": p} if return_p else {"var_out": out}
    return fn


def keras_train_step(x: tf.Tensor, target: tf.Tensor, w: tf.Tensor, b: tf.Tensor) -> dict[str, tf.Tensor]:
    """One training step of a dense box-regression head: Keras Huber loss, its gradients by
    GradientTape, and a proximal update of each weight. The prediction and the gradients are
    returned too (what a training loop logs), so the manifest can name them."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([w, b])
        y = tf.matmul(x, w) + b
        tape.watch(y)
        loss = tf.keras.losses.Huber(delta=1.0)(target, y)
    grad_y, gw, gb = tape.gradient(loss, [y, w, b])

    def prox(v: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
        p = v - LR * g
        return tf.sign(p) * tf.maximum(tf.abs(p) - LR * L1, 0.0) / (1 + LR * L2)
    return {"y": y, "grad_y": grad_y, "gw": gw, "gb": gb, "w_out": prox(w, gw), "b_out": prox(b, gb)}


def hand_square_loss_grad(form: str, beta: float) -> Fn:
    """The gradient, by GradientTape, of a SmoothL1 loss summed over the elements and written by
    hand: "where" tf.where(|x| < beta, 0.5*x*x/beta, |x| - 0.5*beta); "two_masks" with a float mask
    for each side, small*0.5*x*x/beta + large*(|x| - 0.5*beta); "masks" with float masks,
    0.5*x*x*m/beta + (|x| - 0.5*beta)*(1 - m); "min" with q = tf.minimum(|x|, beta),
    0.5*tf.square(q)/beta + (|x| - q) (tf.compat.v1's Huber written out), "min_qq" with q*q, "clip"
    with q = tf.clip_by_value(|x|, 0, beta), "min_max" 0.5*min(|x|, beta)**2/beta + max(|x| - beta, 0)
    (a near miss: both pieces' gradients hold at |x| == beta)."""
    def fn(p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(p)
            x = p - t
            ax = tf.abs(x)
            if form == "where":
                loss = tf.where(ax < beta, 0.5 * x * x / beta, ax - 0.5 * beta)
            elif form == "two_masks":
                small, large = tf.cast(ax < beta, x.dtype), tf.cast(ax >= beta, x.dtype)
                loss = small * 0.5 * x * x / beta + large * (ax - 0.5 * beta)
            elif form == "masks":
                m = tf.cast(ax < beta, x.dtype)
                loss = 0.5 * x * x * m / beta + (ax - 0.5 * beta) * (1.0 - m)
            elif form == "min_qq":
                q = tf.minimum(ax, beta)
                loss = 0.5 * q * q / beta + (ax - q)
            elif form == "clip":
                q = tf.clip_by_value(ax, 0.0, beta)
                loss = 0.5 * tf.square(q) / beta + (ax - q)
            elif form == "min_max":
                loss = 0.5 * tf.square(tf.minimum(ax, beta)) / beta + tf.maximum(ax - beta, 0.0)
            else:
                q = tf.minimum(ax, beta)
                loss = 0.5 * tf.square(q) / beta + (ax - q)
            value = tf.reduce_sum(loss)
        return {"grad": tape.gradient(value, p)}
    return fn


def v1_huber_weighted_grad(p: tf.Tensor, t: tf.Tensor, w: tf.Tensor) -> dict[str, tf.Tensor]:
    """tf.compat.v1.losses.huber_loss with a runtime weights tensor of the prediction's shape."""
    with tf.GradientTape() as tape:
        tape.watch(p)
        value = tf.compat.v1.losses.huber_loss(t, p, weights=w, delta=1.0, reduction=tf.compat.v1.losses.Reduction.SUM)
    return {"grad": tape.gradient(value, p)}


def over_max_grad(go: tf.Tensor, p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
    """The SmoothL1 gradient (beta 0.5, mean) as x / max(|x|, beta): x/beta inside, sign(x) outside."""
    x = p - t
    return {"grad": x / tf.maximum(tf.abs(x), 0.5) * go / tf.cast(tf.size(p), p.dtype)}


def rcnn_loss_grad(sigma_2: float, reduction: str) -> Fn:
    """The gradient of tf-faster-rcnn's _smooth_l1_loss: beta = 1/sigma_2, the mask a stopped
    gradient, tf.pow(x, 2) * sigma_2/2 inside and |x| - 0.5/sigma_2 outside."""
    def fn(p: tf.Tensor, t: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(p)
            x = p - t
            ax = tf.abs(x)
            sign = tf.stop_gradient(tf.cast(tf.less(ax, 1.0 / sigma_2), tf.float32))
            loss = tf.pow(x, 2) * (sigma_2 / 2.0) * sign + (ax - 0.5 / sigma_2) * (1.0 - sign)
            value = tf.reduce_mean(loss) if reduction == "mean" else tf.reduce_sum(loss)
        return {"grad": tape.gradient(value, p)}
    return fn


def softshrink_zeros_update(var: tf.Tensor, delta: tf.Tensor) -> dict[str, tf.Tensor]:
    """Soft-thresholding written with tf.where and tf.zeros_like in the else branch."""
    p = var - LR * delta
    t = LR * L1
    return {"var_out": tf.where(tf.abs(p) > t, p - t * tf.sign(p), tf.zeros_like(p)) / (1 + LR * L2)}


def sgd_update(var: tf.Tensor, delta: tf.Tensor, *lr: tf.Tensor) -> dict[str, tf.Tensor]:
    """Plain SGD: no shrink, no scale."""
    return {"var_out": var - (lr[0] if lr else LR) * delta}


# ----------------------------------------------------------------------------------------------
# Signatures.

def sl1_signature(dtype: str = "float32", go: str = "scalar", dynamic: bool = False) -> list[tf.TensorSpec]:
    """go: "scalar" (0-D dout input), "full" (dout of the prediction's shape) or "none" (no dout)."""
    shape = [None, SL1_SHAPE[1]] if dynamic else SL1_SHAPE
    specs = [tf.TensorSpec(shape, TF_DTYPES[dtype], name=n) for n in ("p", "t")]
    if go == "none":
        return specs
    return [tf.TensorSpec([] if go == "scalar" else shape, TF_DTYPES[dtype], name="go"), *specs]


def prox_signature(dtype: str = "float32", scalars: str = "const", dynamic: bool = False
                   ) -> list[tf.TensorSpec]:
    shape = [None, PROX_SHAPE[1]] if dynamic else PROX_SHAPE
    specs = [tf.TensorSpec(shape, TF_DTYPES[dtype], name=n) for n in ("var", "delta")]
    if scalars == "tensor":
        specs += [tf.TensorSpec([], TF_DTYPES[dtype], name=n) for n in ("lr", "l1", "l2")]
    return specs


# ----------------------------------------------------------------------------------------------
# The catalogue.

SELECT_NOTE = ("tf2onnx writes every float tf.where/SelectV2 (without a NaN/inf constant branch) as its "
               "arithmetic select Add(Mul(Cast(c),a), Mul(b,Cast(Not(c)))), at every opset, for float32 "
               "and float16.")


def sl1_cases() -> list[Case]:
    c: list[Case] = []
    inv_d = stored(1 / SL1_SHAPE[1])  # Keras averages over the last axis (D = 5) before reducing

    def keras(name: str, reduction: str, delta: float, opset: int, inst: dict, notes: str,
              dtype: str = "float32", with_go: bool = False) -> None:
        c.append(Case(name, keras_huber_grad(reduction, delta),
                      sl1_signature(dtype, go="scalar" if with_go else "none"), opset, "smooth_l1_grad", [inst],
                      notes, dtype=dtype))

    keras_form = ("Sum(Mul(Mul(0.5, Add(Mul(Cast(le),C), Mul(0,Cast(Not(le))))), Mul(x,2)), "
                  "Mul(Mul(delta, Add(Mul(Cast(le),0), Mul(C,Cast(Not(le))))), Sign(x))), "
                  "le=LessOrEqual(Abs(x),delta), "
                  "x=Sub(p,t): TF's SelectV2 gradient (where(c,g,0), where(c,0,g)) as two arithmetic selects, the "
                  "square's gradient 0.5*(2x) and the abs branch's delta*Sign(x) summed by Sum (AddN).")
    keras("sl1_keras_huber_sum_d2_f32_op13.onnx", "sum", 2.0, 13,
          sl1(2.0, "sum", inv_d, scale=2.0),
          "tf.keras.losses.Huber(delta=2, reduction='sum') under GradientTape: " + keras_form +
          " C is a [4,5] initializer of 0.2 (Keras' mean over the last axis, D=5; grappler folded the "
          "broadcast). Gradient = 2 * 0.2 * s(x) with sigma 2, so reduction 'sum', scale=delta=2, dout=0.2 "
          "(equivalently scale 0.4, dout 1). tf2onnx merged the equal constants: ONE initializer 2.0 is the "
          "LessOrEqual threshold, the square's Mul(x,2) and the delta factor.")
    keras("sl1_keras_huber_sobs_d1_f32_op13.onnx", "sum_over_batch_size", 1.0, 13,
          sl1(1.0, "mean", 1.0),
          "tf.keras.losses.Huber(delta=1) with the default 'sum_over_batch_size': " + keras_form +
          " C is a [4,5] initializer of 0.05 = 1/numel, delta 1 is Mul(1, ...). Reduction 'mean', dout 1.")
    keras("sl1_keras_huber_sobs_d1_f32_op9.onnx", "sum_over_batch_size", 1.0, 9,
          sl1(1.0, "mean", 1.0),
          "Keras Huber at opset 9: as at opset 13, but LessOrEqual (opset 12) is Not(Greater(Abs(x),1)), so "
          "the sign branch's mask is Cast(Not(Not(Greater))).")
    keras("sl1_keras_huber_sobs_d1_go_f32_op17.onnx", "sum_over_batch_size", 1.0, 17,
          sl1(1.0, "mean", "go"),
          "Keras Huber with tape.gradient(loss, p, output_gradients=go), go 0-D: C is no constant now but "
          "Mul(Tile(Reshape(Tile(Reshape(Where(Equal(4,0), 0, Div(go,4)), [1]), [4]), [4,1]), [1,5]), 0.2): "
          "the DivNoNan of the batch mean as tf2onnx's Where over constants, then broadcast by Tile. "
          "= go/20 everywhere: reduction 'mean', dout go.", with_go=True)
    keras("sl1_keras_huber_none_d05_f32_op13.onnx", "none", 0.5, 13,
          sl1(0.5, "sum", inv_d, scale=0.5),
          "Keras Huber(delta=0.5, reduction='none'): the loss is per sample ([4]); tape.gradient of it sums "
          "it (what a user does). " + keras_form + " Here delta 0.5 equals the square's 0.5, so both "
          "branches start with Mul(0.5, ...). C = 0.2 (1/D). Reduction 'sum', scale 0.5, dout 0.2.")
    keras("sl1_keras_huber_sobs_d1_f16_op13.onnx", "sum_over_batch_size", 1.0, 13,
          sl1(1.0, "mean", 1.0),
          "Keras Huber on float16 p, t: the loss (dtype policy float32) casts them: x=Sub(Cast(p,to=FLOAT), "
          "Cast(t,to=FLOAT)), the float32 body as in the float32 fixture, Cast(to=FLOAT16) on the Sum.",
          dtype="float16")

    v1_form = ("Mul(Sum(W, Add(Mul(Cast(le), Sum(M,M,W')), Mul(zeros,Cast(Not(le))))), Sign(x)), "
               "le=LessOrEqual(Abs(x),delta), M=Mul(Cw,Min(Abs(x),delta)), W/W'/Cw full [4,5] initializers: "
               "the gradient of 0.5*q^2 + delta*(|x|-q), q=Minimum(|x|,delta), through Minimum's LessOrEqual "
               "mask and Abs's Sign: (W + le*(2M - W)) * Sign(x) = w*x inside, w*delta*sign(x) outside, "
               "w the reduction weight.")
    reduction = tf.compat.v1.losses.Reduction
    c.append(Case("sl1_v1_huber_default_d1_f32_op13.onnx",
                  v1_huber_grad(reduction.SUM_BY_NONZERO_WEIGHTS, 1.0), sl1_signature(go="none"), 13,
                  "smooth_l1_grad", [sl1(1.0, "mean", 1.0)],
                  "tf.compat.v1.losses.huber_loss(delta=1), default SUM_BY_NONZERO_WEIGHTS (= mean with "
                  "weights 1.0): " + v1_form + " W = 1/20 = -W', Cw = 0.5/20. Reduction 'mean', dout 1."))
    c.append(Case("sl1_v1_huber_sum_d2_f32_op13.onnx", v1_huber_grad(reduction.SUM, 2.0),
                  sl1_signature(go="none"), 13, "smooth_l1_grad", [sl1(2.0, "sum", 1.0, scale=2.0)],
                  "tf.compat.v1.losses.huber_loss(delta=2, reduction=SUM): " + v1_form + " W = 2 = -W', "
                  "Cw = 0.5. Reduction 'sum', scale=delta=2, dout 1."))
    c.append(Case("sl1_v1_huber_none_d1_f32_op13.onnx", v1_huber_grad(reduction.NONE, 1.0),
                  sl1_signature(go="none"), 13, "smooth_l1_grad", [sl1(1.0, "sum", 1.0)],
                  "tf.compat.v1.losses.huber_loss(delta=1, reduction=NONE), the tape summing the per-element "
                  "losses (as the TF object detection API's box loss does before its own sums): " + v1_form +
                  " W = 1 = -W', Cw = 0.5: dout 1 on every element."))

    hand_form = ("Mul(Add(Mul(Cast(Less(Abs(x),0.5)), Mul(x,2)), Mul(Sign(x), Cast(Not(Less)))), Mul(go,0.05)): "
                 "grappler turned x/0.5 into Mul(x,2) and go/numel (numel folded to 20) into Mul(go,0.05).")
    for opset in (9, 13, 17):
        c.append(Case(f"sl1_hand_where_mean_b05_f32_op{opset}.onnx", hand_where_grad("mean", 0.5),
                      sl1_signature(), opset, "smooth_l1_grad", [sl1(0.5, "mean", "go")],
                      f"Hand-written tf.where(|x| < 0.5, x/0.5, sign(x)) * go/tf.size(p), opset {opset}: "
                      + hand_form + " " + SELECT_NOTE))
    c.append(Case("sl1_hand_le_sum_b2_f32_op13.onnx", hand_where_grad("sum", 2.0, compare="le"), sl1_signature(),
                  13, "smooth_l1_grad", [sl1(2.0, "sum", "go")],
                  "tf.where(|x| <= 2, x/2, sign(x)) * go: Mul(Add(Mul(Cast(LessOrEqual(Abs(x),2)), Mul(x,0.5)), "
                  "Mul(Sign(x), Cast(Not(LessOrEqual)))), go) (x/2 as Mul(x,0.5))."))
    c.append(Case("sl1_hand_le_sum_b2_f32_op9.onnx", hand_where_grad("sum", 2.0, compare="le"), sl1_signature(),
                  9, "smooth_l1_grad", [sl1(2.0, "sum", "go")],
                  "<= at opset 9 (no LessOrEqual before opset 12): le = Not(Greater(Abs(x),2)), so the masks are "
                  "Cast(le) and Cast(Not(le)) = Cast(Not(Not(Greater)))."))
    c.append(Case("sl1_hand_clip_none_b05_f32_op13.onnx", hand_clip_grad(0.5), sl1_signature(go="full"), 13,
                  "smooth_l1_grad", [sl1(0.5, "none", "go")],
                  "tf.clip_by_value(x/0.5, -1, 1) * go with a full-shape go: Mul(Max(Min(Mul(Sub(p,t),2), 1), -1), go) "
                  "(ClipByValue is Min then Max, no Clip; x/0.5 as Mul(x,2))."))
    c.append(Case("sl1_hand_where_sum_b05_f16_op13.onnx", hand_where_grad("sum", 0.5), sl1_signature("float16"), 13,
                  "smooth_l1_grad", [sl1(0.5, "sum", "go")],
                  "Native float16 hand-written form: Less(Abs(x), 0.5 f16), Mul(x, 2 f16), Cast(.., to=FLOAT16) "
                  "masks; no float32 anywhere.", dtype="float16"))

    inst = sl1(0.5, "mean", "go")
    c.append(Case("sl1_hand_where_mean_b05_f32_dynamic_op13.onnx", hand_where_grad("mean", 0.5),
                  sl1_signature(dynamic=True), 13, "smooth_l1_grad", [inst],
                  "TensorSpec([None, 5]) for p and t: tf2onnx names each unknown dim on its own (p: unk__N, t: "
                  "unk__M), so nothing says p and t have one shape (Sub may broadcast [1,5] against [7,5]). "
                  "numel is Cast(Cast(Size(p),to=INT32),to=FLOAT), g = Div(go, numel), else the static mean form. "
                  "The pass expands p and t to each other's shape before the fused node and takes the graph's "
                  "own g as dout (reduction sum): numel(p) is not the broadcast's where p broadcasts."))
    c.append(Case("nm_sl1_sub_output_f32_op13.onnx", hand_where_grad("mean", 0.5, return_x=True), sl1_signature(),
                  13, "near_miss", [],
                  "Near miss: x = Sub(p,t) is also the graph output 'x'.",
                  not_fused=[{**inst, "reason": "intermediate Sub(p,t) is a graph output"}]))
    c.append(Case("sl1_hand_huber_clamp_sum_d2_f32_op13.onnx", hand_clip_grad(2.0, huber=True), sl1_signature(), 13,
                  "smooth_l1_grad", [sl1(2.0, "sum", "go", scale=2.0)],
                  "The Huber gradient tf.clip_by_value(x, -2, 2) * go: Mul(Max(Min(Sub(p,t), 2), -2), go), a "
                  "SmoothL1 gradient with beta = delta = 2 scaled by 2."))
    for masks, note in (("two", "Cast(Less(|x|,0.5)) and Cast(GreaterOrEqual(|x|,0.5))"),
                        ("one_minus", "m = Cast(Less(|x|,0.5)) and Sub(1, m)")):
        c.append(Case(f"sl1_hand_masks_{masks}_sum_b05_f32_op13.onnx", hand_mask_grad(masks), sl1_signature(), 13,
                      "smooth_l1_grad", [sl1(0.5, "sum", "go")],
                      f"The select written with float masks by hand, {note}: an arithmetic select."))
    c.append(Case("sl1_hand_sign_min_sum_b05_f32_op13.onnx", hand_mask_grad("sign_min"), sl1_signature(), 13,
                  "smooth_l1_grad", [sl1(0.5, "sum", "go")],
                  "tf.sign(x) * tf.minimum(|x|/0.5, 1) * go: the gradient's magnitude capped at 1 "
                  "(x/0.5 as Mul(x, 2))."))
    return c


def user_code_spelling_cases() -> list[Case]:
    """Spellings of TensorFlow user code: squares as x*x, Faster R-CNN's sigma, clamps capped at the
    largest float, nested wheres, min residuals, a Keras dense training step."""
    c = []
    for form, note in (
            ("where", "TF's gradient of x*x sums one term per operand: Sum(a, b, a) around the arithmetic select"),
            ("masks", "float masks, the x*x term's two halves a Sum(a, b, a)"),
            ("two_masks", "a mask per side: the x*x term's halves are Mul(u, v) and Mul(v, u) of a shared "
                          "mask*0.5, added in one Sum with the other side"),
            ("min", "tf.minimum(|x|, 1) and tf.square: grappler broadcasts a term with an Expand to its own shape"),
            ("min_qq", "tf.minimum(|x|, 1) and q*q: the q*q term's halves are 0.5*q broadcast by an Expand and "
                       "q times a full tensor of 0.5, one Sum with the -1"),
            ("clip", "q = tf.clip_by_value(|x|, 0, 1): Max(Min(|x|, 1), 0), whose gradient selects on "
                     "Min(|x|, 1) >= 0 too, true for every x but NaN")):
        c.append(Case(f"sl1_hand_square_{form}_sum_b1_f32_op13.onnx", hand_square_loss_grad(form, 1.0),
                      sl1_signature(go="none"), 13, "smooth_l1_grad", [sl1(1.0, "sum", 1.0)],
                      f"GradientTape of a hand-written SmoothL1 loss with 0.5*x*x, reduce_sum ({note})."))
    c.append(Case("nm_sl1_hand_min_max_sum_b1_f32_op13.onnx", hand_square_loss_grad("min_max", 1.0),
                  sl1_signature(go="none"), 13, "near_miss", [],
                  "Near miss: 0.5*min(|x|, 1)**2 + max(|x| - 1, 0): TensorFlow's gradient selects on |x| <= 1 for "
                  "the first piece and on |x| - 1 >= 0 for the second, so at |x| == 1 it adds both: 2*sign(x), "
                  "where the SmoothL1 gradient is sign(x).",
                  not_fused=[{**sl1(1.0, "sum", 1.0), "reason": "both masks hold at |x| == beta"}]))
    c.append(Case("sl1_hand_square_where_sum_b1_f16_op13.onnx", hand_square_loss_grad("where", 1.0),
                  sl1_signature("float16", go="none"), 13, "smooth_l1_grad", [sl1(1.0, "sum", 1.0)],
                  "The where form in float16: the two copies of the x*x term are multiplied in different "
                  "orders (Mul(mul, g) and Mul(0.5, Mul(g, sub)))", dtype="float16"))
    c.append(Case("nm_sl1_v1_huber_runtime_weight_f32_op13.onnx", v1_huber_weighted_grad,
                  [*sl1_signature(go="none"), tf.TensorSpec(SL1_SHAPE, tf.float32, name="w")], 13, "smooth_l1_grad",
                  [sl1(1.0, "none", "w")],
                  "tf.compat.v1.losses.huber_loss with weights=w, a runtime tensor: the gradient is "
                  "sign(x) * (W + select(|x| <= 1, 2*0.5*W*min(|x|, 1) - W, 0)) with W = w, which is the SmoothL1 "
                  "gradient with dout = w; the patterns read it with a constant weight only (a near miss by their "
                  "rule, hence the file name), the recogniser by meaning fuses it."))
    c.append(Case("sl1_hand_over_max_mean_b05_f32_op13.onnx", over_max_grad, sl1_signature(), 13,
                  "smooth_l1_grad", [sl1(0.5, "mean", "go")],
                  "x / tf.maximum(|x|, 0.5) * go / numel: x/beta inside, x/|x| = sign(x) outside (NaN at "
                  "+-inf in the graph, the report's caveat)."))
    for reduction in ("sum", "mean"):
        c.append(Case(f"sl1_rcnn_sigma2_{reduction}_b05_f32_op13.onnx", rcnn_loss_grad(2.0, reduction),
                      sl1_signature(go="none"), 13, "smooth_l1_grad", [sl1(0.5, reduction, 1.0)],
                      "tf-faster-rcnn's smooth L1 with sigma^2 = 2: grappler leaves each branch's scale as a full "
                      "tensor of its own (2*0.5 and 1, over numel for the mean), folded into the coefficients."))
    for clamp, note in (("clip_inf", "tf.clip_by_value(|p| - t, 0, np.inf): Max(Min(d, inf), 0), the Min a no-op"),
                        ("min_residual", "p - sign(p) * tf.minimum(|p|, t): the shrink as the kernel computes it"),
                        ("abs_minus_min", "sign(p) * (|p| - tf.minimum(|p|, t))")):
        c.append(Case(f"prox_const_{clamp}_f32_op13.onnx", prox_update(clamp=clamp), prox_signature(), 13,
                      "proximal_gd", [const_prox()], note + "."))
    c.append(Case("prox_const_nested_where_f32_op13.onnx", prox_update(clamp="nested_where"), prox_signature(), 13,
                  "proximal_gd", [const_prox()],
                  "tf.where(p > t, p - t, tf.where(p < -t, p + t, 0*p)): two nested arithmetic selects; an inf p makes "
                  "the branches not taken NaN through their 0 masks (the report's caveat)."))
    c.append(Case("prox_const_softshrink_0p_unscaled_f32_op13.onnx", prox_update(clamp="softshrink_0p", scale="none"),
                  prox_signature(), 13, "proximal_gd", [prox("folded", stored(LR), stored(LR * L1), 1.0)],
                  "tf.where(|p| > t, p - sign(p)*t, 0*p) with l2 = 0: the arithmetic select's Add is the output."))
    c.append(Case("prox_tensor_min_residual_f32_op13.onnx", prox_update(clamp="min_residual", scalars="tensor"),
                  prox_signature(scalars="tensor"), 13, "proximal_gd", [raw_prox()],
                  "p - sign(p) * tf.minimum(|p|, lr*l1) with lr, l1, l2 inputs: the shrink for every t, a "
                  "negative one too."))
    return c


# the head's weight, a fixed draw: the graph holds it as an initializer
HEAD_W = tf.Variable(np.random.default_rng(26).standard_normal([8, 4]).astype(np.float32), name="w")


def custom_gradient_head_step(x: tf.Tensor, target: tf.Tensor) -> dict[str, tf.Tensor]:
    """A dense box-regression head whose SmoothL1 loss (beta 0.5, mean) has its gradient written by
    hand with tf.custom_gradient, as detection code does, with a dynamic batch: the prediction
    y = x @ w and the target each get their own unknown dim. The prediction and its gradient are
    returned too (what a training loop logs), so the manifest can name them."""
    with tf.GradientTape() as tape:
        y = tf.matmul(x, HEAD_W)
        tape.watch(y)
        loss = smooth_l1_mean_custom_grad(y, target)
    grad_y, gw = tape.gradient(loss, [y, HEAD_W])
    return {"y": y, "grad_y": grad_y, "gw": gw}


@tf.custom_gradient
def smooth_l1_mean_custom_grad(pred: tf.Tensor, target: tf.Tensor) -> tuple[tf.Tensor, Callable]:
    beta = 0.5
    x = pred - target
    ax = tf.abs(x)
    loss = tf.reduce_mean(tf.where(ax < beta, 0.5 * x * x / beta, ax - 0.5 * beta))

    def grad(dy: tf.Tensor) -> tuple[tf.Tensor, None]:
        n = tf.cast(tf.size(x), x.dtype)
        return dy / n * tf.where(ax < beta, x / beta, tf.sign(x)), None
    return loss, grad


def mixed_cases() -> list[Case]:
    step_prox = {k: v for k, v in const_prox().items() if k not in ("inputs", "output")}
    attrs = [
        {"op": SL1, "sigma": 1.0, "reduction": "mean", "scale": 1.0,
         "inputs": {"predict": "y", "label": "target", "dout": 1.0}, "output": "grad_y"},
        {**step_prox, "inputs": {**const_prox()["inputs"], "var": "w", "delta": "gw"}, "output": "w_out"},
        {**step_prox, "inputs": {**const_prox()["inputs"], "var": "b", "delta": "gb"}, "output": "b_out"},
    ]
    signature = [tf.TensorSpec([8, 6], tf.float32, name="x"), tf.TensorSpec([8, 4], tf.float32, name="target"),
                 tf.TensorSpec([6, 4], tf.float32, name="w"), tf.TensorSpec([4], tf.float32, name="b")]
    head_signature = [tf.TensorSpec([None, 8], tf.float32, name="x"),
                      tf.TensorSpec([None, 4], tf.float32, name="target")]
    head = {"op": SL1, "sigma": 0.5, "reduction": "mean", "scale": 1.0,
            "inputs": {"predict": "y", "label": "target", "dout": 1.0}, "output": "grad_y"}
    return [Case("mixed_keras_dense_step_f32_op13.onnx", keras_train_step, signature, 13, "mixed", attrs,
                 "A Keras training step: y = x@w + b, Huber(1) loss with the default reduction, its gradient "
                 "w.r.t. y (the SmoothL1 backward, reused by the MatMul and bias gradients) and a proximal "
                 "update of w and b with Python-float hyperparameters. y and the gradients are outputs too."),
            Case("sl1_custom_grad_head_mean_b05_f32_dynamic_op13.onnx", custom_gradient_head_step, head_signature,
                 13, "smooth_l1_grad", [head],
                 "A dense head y = x@w with a dynamic batch and a SmoothL1 loss whose gradient is written with "
                 "tf.custom_gradient: grad_y = Mul(Reciprocal(Cast(Cast(Size(x),to=INT32),to=FLOAT)), "
                 "Add(Mul(Cast(Less(Abs(x),0.5)),Mul(x,2)), Mul(Sign(x),Cast(Not(Less))))), x = Sub(y, target), "
                 "the tape's seed 1 folded; gw = MatMul(Transpose(x), grad_y). y is [unk__a, 4] and target "
                 "[unk__b, 4], dims named apart: the pass expands the two to each other's shape and takes the "
                 "graph's 1/numel as dout (reduction sum).")]


def prox_cases() -> list[Case]:
    c: list[Case] = []

    def add(name: str, fn: Fn, opset: int, inst: dict | None, notes: str, dtype: str = "float32",
            scalars: str = "const", dynamic: bool = False, not_fused: list[dict] | None = None) -> None:
        c.append(Case(name, fn, prox_signature(dtype, scalars, dynamic), opset,
                      "proximal_gd" if inst else "near_miss", [inst] if inst else [], notes, dtype=dtype,
                      not_fused=not_fused or []))

    for opset in (9, 13, 17):
        add(f"prox_const_maximum_f32_op{opset}.onnx", prox_update(), opset, const_prox(),
            f"Python-float hyperparameters, tf.maximum(., 0), opset {opset}: Mul(Sign(p), Mul(0.995025, "
            "Max(Sub(Abs(p),0.001), 0))), p=Sub(var, Mul(0.1,delta)): grappler folded lr*l1 and replaced "
            "the division by 1.005 with a product by its reciprocal, moved inside next to Max.")
    add("prox_tensor_maximum_f32_op13.onnx", prox_update(scalars="tensor"), 13, raw_prox(),
        "lr, l1, l2 are 0-D inputs: Div(Mul(Sign(p), Max(Sub(Abs(p),Mul(lr,l1)),0)), Add(1,Mul(lr,l2))), "
        "p=Sub(var,Mul(lr,delta)) (the 1 is the FIRST Add operand).", scalars="tensor")
    add("prox_const_relu_f32_op13.onnx", prox_update(clamp="relu"), 13, const_prox(),
        "tf.nn.relu: Mul(Sign(p), Mul(0.995025, Relu(Sub(Abs(p),0.001)))).")
    add("prox_const_clip_fmax_f32_op13.onnx", prox_update(clamp="clip"), 13,
        const_prox(shrink_max=float(np.finfo(np.float32).max)),
        "tf.clip_by_value(., 0, tf.float32.max): Max(Min(Sub(Abs(p),0.001), 3.4028235e38), 0) (Min first, no "
        "Clip): the same values as Clip(min=0), so shrink_max is float32's max.")
    add("prox_const_negmul_f32_op13.onnx", prox_update(step="neg_mul"), 13, const_prox(),
        "var + (-lr)*delta with a Python lr: Add(var, Mul(-0.1, delta)).")
    add("prox_tensor_negmul_f32_op13.onnx", prox_update(step="neg_mul", scalars="tensor"), 13, raw_prox(),
        "var + (-lr)*delta with a 0-D lr input: Add(var, Mul(Neg(lr), delta)).", scalars="tensor")
    add("prox_tensor_recip_f32_op13.onnx", prox_update(scale="recip", scalars="tensor"), 13, raw_prox(),
        "Times the reciprocal with lr, l1, l2 inputs: Mul(Mul(Sign(p), Max(.,0)), Div(1, Add(1, Mul(lr,l2)))). "
        "(With Python floats, *(1/k) gives the same graph as /k: grappler makes both the reciprocal "
        "product of prox_const_maximum_f32_op13.)", scalars="tensor")
    add("prox_const_maximum_f16_op13.onnx", prox_update(), 13, const_prox("float16"),
        "float16 with Python floats: float16 initializers 0.09998, 0.0010004, 0.99512, and here the "
        "reciprocal is the OUTER factor: Mul(Mul(Sign(p), Max(Sub(Abs(p),t),0)), 0.99512).", dtype="float16")
    add("prox_tensor_maximum_f16_op13.onnx", prox_update(scalars="tensor"), 13, raw_prox(),
        "float16 tensors and float16 0-D lr, l1, l2: the float32 form in float16, no Casts.", dtype="float16",
        scalars="tensor")
    add("prox_softshrink_zeros_f32_op13.onnx", softshrink_zeros_update, 13, const_prox(),
        "tf.where(|p| > t, p - t*sign(p), tf.zeros_like(p)) / k, which tf2onnx writes as Mul(Add(Mul(Cast(G), "
        "Sub(p, Mul(0.001,Sign(p)))), Mul(zeros[8,16], Cast(Not(G)))), 0.995025), G=Greater(Abs(p),0.001). "
        "NOT a near miss here, unlike torch.where with zeros: in the arithmetic select a NaN p gives "
        "0*NaN = NaN (G is false), +-inf gives +-inf, so it equals the fused op on every input. "
        + SELECT_NOTE)

    inst = raw_prox()
    add("nm_prox_tensor_maximum_f32_dynamic_op13.onnx", prox_update(scalars="tensor"), 13, inst,
        "TensorSpec([None, 16]) for var and delta: tf2onnx names the unknown dims on their own (unk__N, "
        "unk__M); the recogniser fuses it with an Expand of each to the other's shape before the fused node "
        "(the patterns refuse it with a hint to fix the dims, hence the name).", scalars="tensor", dynamic=True)
    add("nm_sgd_const_f32_op13.onnx", sgd_update, 13, None, "Near miss: plain SGD Sub(var, Mul(0.1, delta)).")
    c.append(Case("nm_sgd_tensor_f32_op13.onnx", sgd_update,
                  [*prox_signature(), tf.TensorSpec([], tf.float32, name="lr")], 13, "near_miss", [],
                  "Near miss: plain SGD Sub(var, Mul(lr, delta)) with a 0-D lr input."))
    add("nm_prox_p_output_f32_op13.onnx", prox_update(return_p=True), 13, None,
        "Near miss: p = Sub(var, Mul(0.1,delta)) is also the graph output 'p'.",
        not_fused=[{**const_prox(), "reason": "intermediate p is a graph output"}])
    add("prox_const_clip_residual_f32_op13.onnx", prox_update(clamp="residual"), 13, const_prox(),
        "ISTA's soft threshold p - tf.clip_by_value(p, -t, t) with a Python t: Sub(p, Max(Min(p, 0.001), "
        "-0.001)), then the reciprocal product.")
    add("nm_prox_tensor_clip_residual_f32_op13.onnx", prox_update(clamp="residual", scalars="tensor"), 13, None,
        "Near miss: p - tf.clip_by_value(p, -t, t) with t = lr*l1 from inputs: the shrink only for t >= 0, "
        "which nothing in the graph says.", scalars="tensor",
        not_fused=[{**raw_prox(), "reason": "t is a runtime value"}])
    add("prox_const_relu_difference_f32_op13.onnx", prox_update(clamp="relu_difference"), 13, const_prox(),
        "LISTA's soft threshold tf.nn.relu(p - t) - tf.nn.relu(-p - t) with a Python t.")
    add("prox_tensor_masked_f32_op13.onnx", prox_update(clamp="masked", scalars="tensor"), 13, raw_prox(),
        "Softshrink with a float mask, (p - t*sign(p)) * tf.cast(|p| > t, float32), t = lr*l1 from inputs: "
        "equal to the shrink for every t.", scalars="tensor")
    return c


# ----------------------------------------------------------------------------------------------
# Export, describe, verify.

def convert(fn: Fn, signature: list[tf.TensorSpec], opset: int) -> onnx.ModelProto:
    """tf2onnx.convert.from_function, canonicalised (see canonicalise)."""
    model, _ = tf2onnx.convert.from_function(tf.function(fn), input_signature=signature, opset=opset)
    canonicalise(model)
    return model


def canonicalise(model: onnx.ModelProto) -> None:
    """Make the file a function of the computation alone, so reruns give the same bytes.

    Between two runs (even with one PYTHONHASHSEED) tf2onnx's output varies in node order, in the
    numbers of the names it invents (SelectV2__10, unk__7) and in which name survives when two
    duplicates (CSE, equal constants) are merged; the computation does not change. So the nodes
    are put in depth-first order from the outputs and renamed by it (<op>_<k>, values
    <op>_<k>:<j>), initializers Const_<i>:0 in order of first use, unknown dims unk__<i> in order
    of appearance; graph input and output names stay. The graph doc string
    names the traced function, numbered per process, so it goes too.
    """
    graph = model.graph
    graph.doc_string = ""
    producer = {o: n for n in graph.node for o in n.output}
    initializers = {i.name: i for i in graph.initializer}
    order: list[onnx.NodeProto] = []
    used: list[str] = []
    visited: set[int] = set()

    def visit(value: str) -> None:
        if value in initializers and value not in used:
            used.append(value)
        node = producer.get(value)
        if node is None or id(node) in visited:
            return
        visited.add(id(node))
        for name in node.input:
            visit(name)
        order.append(node)

    for output in graph.output:
        visit(output.name)
    if len(order) != len(graph.node):
        raise RuntimeError(f"{len(graph.node) - len(order)} nodes do not feed an output")
    rename = {name: f"Const_{i}:0" for i, name in enumerate(used)}
    kept = {v.name for v in (*graph.input, *graph.output)}
    nodes = []
    for k, node in enumerate(order):
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"{node.op_type}_{k}"
        rename.update({o: f"{copy.name}:{j}" for j, o in enumerate(node.output) if o not in kept})
        nodes.append(copy)
    consts = []
    for name in used:
        const = onnx.TensorProto()
        const.CopyFrom(initializers[name])
        const.name = rename[name]
        consts.append(const)
    for node in nodes:
        node.input[:] = [rename.get(i, i) for i in node.input]
        node.output[:] = [rename.get(o, o) for o in node.output]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(consts)
    dims: dict[str, str] = {}
    for value in (*graph.input, *graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = dims.setdefault(dim.dim_param, f"unk__{len(dims)}")


def export(case: Case) -> onnx.ModelProto:
    model = convert(case.fn, case.signature, case.opset)
    # tf2onnx keeps TF ops it cannot convert (continue_on_error); the checker names them.
    onnx.checker.check_model(model)
    return model


def input_specs(case: Case) -> dict[str, dict]:
    """The manifest's "inputs": concrete shapes (run shapes for unknown dims), dtype, scalar ranges."""
    specs = {}
    for spec in case.signature:
        shape = [RUN_BATCH if d is None else d for d in spec.shape.as_list()]
        entry: dict = {"shape": shape, "dtype": spec.dtype.name}
        if spec.name in SCALAR_RANGES:
            entry["range"] = list(SCALAR_RANGES[spec.name])
        specs[spec.name] = entry
    return specs


def entry_for(case: Case, model: onnx.ModelProto) -> dict:
    opset = {o.domain: o.version for o in model.opset_import}[""]
    entry = {"file": case.file, "exporter": "tf2onnx", "opset": opset, "family": case.family,
             "expected": case.expected, "attrs": case.attrs, "dtype": case.dtype, "dynamic": case.dynamic,
             "inputs": input_specs(case), "notes": case.notes, "form": render_form(model),
             "size_bytes": len(model.SerializeToString())}
    if case.not_fused:
        entry["not_fused"] = case.not_fused
    return entry


def _failure(action: Callable[[], object]) -> str:
    """Run an export expected to fail; return its one-line reason (no paths, no addresses)."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - any failure is the measurement
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        keys = ("Op requires", "incompatible", "No Op registered")
        reason = next((ln for ln in lines if any(k in ln for k in keys)), lines[-1] if lines else "")
        kind = f"{type(exc).__name__}: "
        return f"fails: {kind}{reason.removeprefix(kind)[:220].rstrip('.')}"
    return "succeeds with this tf2onnx version"


def _unconverted(fn: Fn, signature: list[tf.TensorSpec], opset: int) -> str:
    """Convert and name the TF ops tf2onnx left in the graph (it carries on past them)."""
    model = convert(fn, signature, opset)
    left = Counter(n.op_type for n in model.graph.node if n.domain == "" and not onnx.defs.has(n.op_type))
    if not left:
        return "succeeds with this tf2onnx version"
    return "leaves TF ops unconverted: " + ", ".join(f"{op} x{k}" for op, k in sorted(left.items()))


def exporter_limits() -> dict[str, list[str]]:
    """Export paths the fixtures would naturally use but that fail here, keyed by the fixture whose
    notes record them (that fixture is the workaround)."""
    var = tf.Variable(tf.zeros(PROX_SHAPE), name="var")
    delta_spec = [tf.TensorSpec(PROX_SHAPE, tf.float32, name="delta")]
    scalars = {"alpha": tf.constant(LR), "l1": tf.constant(L1), "l2": tf.constant(L2)}

    def ref_op(delta: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"var_out": tf.raw_ops.ApplyProximalGradientDescent(var=var, delta=delta, **scalars)}

    def resource_op(delta: tf.Tensor) -> dict[str, tf.Tensor]:
        tf.raw_ops.ResourceApplyProximalGradientDescent(var=var.handle, delta=delta, **scalars)
        return {"var_out": var.read_value()}

    optimizer = tf.compat.v1.train.ProximalGradientDescentOptimizer(
        LR, l1_regularization_strength=L1, l2_regularization_strength=L2)

    def v1_optimizer(delta: tf.Tensor) -> dict[str, tf.Tensor]:
        optimizer.apply_gradients([(delta, var)])
        return {"var_out": var.read_value()}

    prox_target = str(FIXTURES / "prox_const_maximum_f32_op13.onnx")
    probes = [
        (prox_target, "tf.raw_ops.ApplyProximalGradientDescent on a tf.Variable (tracing)",
         lambda: _failure(lambda: convert(ref_op, delta_spec, 13))),
        (prox_target, "tf2onnx of tf.raw_ops.ResourceApplyProximalGradientDescent",
         lambda: _failure(lambda: convert(resource_op, delta_spec, 13))),
        (prox_target, "tf2onnx of tf.compat.v1.train.ProximalGradientDescentOptimizer.apply_gradients",
         lambda: _failure(lambda: convert(v1_optimizer, delta_spec, 13))),
        (str(FIXTURES / "sl1_hand_where_mean_b05_f32_dynamic_op13.onnx"),
         "tf2onnx of the Keras Huber gradient with TensorSpec([None, 5]) (sum_over_batch_size)",
         lambda: _unconverted(keras_huber_grad("sum_over_batch_size", 1.0),
                              sl1_signature(go="none", dynamic=True), 13)),
    ]
    limits: dict[str, list[str]] = {}
    for target, label, measure in probes:
        limits.setdefault(target, []).append(f"Exporter limit measured: {label} {measure()}.")
    return limits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print each graph's form")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    # tf2onnx logs every op it cannot convert with a traceback; the limit probes expect those.
    logging.disable(logging.CRITICAL)
    check_entry = load_checker()
    limits = exporter_limits()
    entries, rows = [], []
    for case in sl1_cases() + prox_cases() + mixed_cases() + user_code_spelling_cases():
        model = export(case)
        entry, worst = record(case.file, model, lambda m, case=case: entry_for(case, m), check_entry, limits, opts.show)
        entries.append(entry)
        rows.append((case.name, entry["opset"], entry["size_bytes"], worst, ops_histogram(model)))
    if limits:
        raise RuntimeError(f"exporter limits recorded for files that were not generated: {sorted(limits)}")
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    width = max(len(r[0]) for r in rows)
    print(f"\n{'file':<{width}}  opset  bytes   maxMARE  ops")
    for name, opset, size, worst, hist in rows:
        print(f"{name:<{width}}  {opset:>5} {size:>6}  {worst:8.2e}  {hist}")
    print(f"{len(rows)} models written to {FIXTURES} and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
