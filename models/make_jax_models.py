"""Regenerate the JAX fixtures in tests/fixtures/jax/ (with their manifest.json).

Every graph here is what jax2onnx.to_onnx writes for a JAX function the way JAX users write the
SmoothL1/Huber backward (jax.grad / jax.vjp / jax.value_and_grad over a loss written with jnp.where,
jnp.abs, jnp.minimum, jnp.clip, or optax.huber_loss) and the proximal gradient descent update
(jnp soft thresholding after a plain or optax.sgd step), plus near misses that look alike but
compute something else. The manifest records, for each fixture, the ground truth: the fused-op
instances it holds with their parameters ("attrs"), or the formula a near miss computes and the
instance it resembles ("near_misses"). Each fixture is checked right after export with
check_new_entry() of tests/lowering/new_exporter_check.py.

Keras 3 losses (keras.losses.Huber, keras.losses.huber, keras.ops) run on the JAX backend
(KERAS_BACKEND=jax, set here before keras is imported) and are differentiated with jax.vjp too.

Needs jax[cpu], jax2onnx, optax, keras (3), onnx, onnxruntime and ml_dtypes; the project is imported
from this checkout, not installed. CI has none of them, so the .onnx files and the manifest are
committed.
Usage (in a separate environment: python -m venv /tmp/venv-jax && /tmp/venv-jax/bin/pip install
"jax[cpu]" jax2onnx optax keras onnxruntime ml_dtypes): /tmp/venv-jax/bin/python models/make_jax_models.py
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

# Keras reads its backend when it is imported
os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import optax  # noqa: E402
from fixture_common import (  # noqa: E402
    keep_fusion_status,
    load_new_exporter_checker,
    ops_histogram,
    record_new_exporter_fixture,
    write_new_exporter_manifest,
)
from jax2onnx import to_onnx  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/jax")
MANIFEST = REPO / FIXTURES / "manifest.json"

SL1 = "SmoothL1LossGradV2"
PROX = "ApplyProximalGradientDescent"
SL1_SHAPE, PROX_SHAPE = (4, 5), (8, 16)
LR, L1, L2 = 0.1, 0.01, 0.05
SCALAR_RANGES = {"lr": (0.05, 0.2), "l1": (0.005, 0.05), "l2": (0.01, 0.1), "threshold": (0.001, 0.01),
                 "divisor": (1.0, 1.1)}
JNP_DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}
EXPORTER_VERSION = f"jax {version('jax')}, jax2onnx {version('jax2onnx')}, optax {version('optax')}"
KERAS_VERSION = f"{EXPORTER_VERSION}, keras {version('keras')} (backend {os.environ['KERAS_BACKEND']})"


def stored(value: float, dtype: str = "float32") -> float:
    """The value a constant of this dtype really holds, so references use what the graph uses."""
    return float(np.asarray(value, JNP_DTYPES[dtype]).astype(np.float64))


@dataclass
class Case:
    name: str
    fn: Callable[..., object]
    inputs: dict[str, tuple[tuple[int, ...], str]]  # graph input name -> (shape, dtype), in order
    outputs: list[str]
    family: str
    source: str
    notes: str
    # the instances, or a function of the exported graph giving them (to name intermediates)
    attrs: list[dict] | Callable[[onnx.ModelProto], list[dict]] = field(default_factory=list)
    near_misses: list[dict] = field(default_factory=list)
    dtype: str = "float32"
    opset: int | None = None  # None: jax2onnx's default

    @property
    def file(self) -> str:
        return str(FIXTURES / f"{self.name}.onnx")


def sl1(sigma: float, reduction: str, dout: str | float = 1.0, scale: float = 1.0, output: str = "grad",
        predict: str = "p", label: str = "t") -> dict:
    return {"op": SL1, "sigma": sigma, "reduction": reduction, "scale": scale,
            "inputs": {"predict": predict, "label": label, "dout": dout}, "output": output}


def prox(scalar_form: str, alpha: str | float, l1: str | float, l2: str | float, output: str = "var_out") -> dict:
    return {"op": PROX, "scalar_form": scalar_form,
            "inputs": {"var": "var", "alpha": alpha, "l1": l1, "l2": l2, "delta": "delta"}, "output": output}


def near_miss(formula: str, inputs: dict, resembles: dict, output: str, **params: object) -> dict:
    return {"output": output, "formula": formula, "inputs": inputs, "params": params, "resembles": resembles}


def sl1_inputs(dtype: str = "float32", dout: tuple[int, ...] | None = None) -> dict:
    spec = {"p": (SL1_SHAPE, dtype), "t": (SL1_SHAPE, dtype)}
    return {**spec, "dout": (dout, dtype)} if dout is not None else spec


def prox_inputs(dtype: str = "float32", scalars: tuple[str, ...] = ()) -> dict:
    return {"var": (PROX_SHAPE, dtype), "delta": (PROX_SHAPE, dtype), **{s: ((), "float32") for s in scalars}}


# ----------------------------------------------------------------------------------------------
# Losses as users write them (elementwise; the reduction is applied by the caller).

def smooth_l1_where(beta: float, compare: str = "lt") -> Callable[[jax.Array, jax.Array], jax.Array]:
    """jnp.where(|x| < beta, 0.5 x^2 / beta, |x| - 0.5 beta), PyTorch's definition."""
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        x = p - t
        ax = jnp.abs(x)
        inside = ax < beta if compare == "lt" else ax <= beta
        return jnp.where(inside, 0.5 * x * x / beta, ax - 0.5 * beta)
    return loss


def smooth_l1_minimum(beta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """q = min(|x|, beta); 0.5 q^2 / beta + (|x| - q): no branch, the kink is in jnp.minimum."""
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        ax = jnp.abs(p - t)
        q = jnp.minimum(ax, beta)
        return 0.5 * q * q / beta + (ax - q)
    return loss


def smooth_l1_clip(beta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """c = clip(x, -beta, beta); 0.5 c^2 / beta + |x - c|."""
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        x = p - t
        c = jnp.clip(x, -beta, beta)
        return 0.5 * c * c / beta + jnp.abs(x - c)
    return loss


def huber_where(delta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """jnp.where(|x| <= delta, 0.5 x^2, delta (|x| - 0.5 delta))."""
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        x = p - t
        ax = jnp.abs(x)
        return jnp.where(ax <= delta, 0.5 * x * x, delta * (ax - 0.5 * delta))
    return loss


def huber_maximum(delta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """0.5 x^2 - 0.5 max(|x| - delta, 0)^2: the quadratic minus its overshoot (no branch at all)."""
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        x = p - t
        over = jnp.maximum(jnp.abs(x) - delta, 0.0)
        return 0.5 * x * x - 0.5 * over * over
    return loss


def optax_huber(delta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        return optax.huber_loss(p, t, delta=delta)
    return loss


def huber_relu(delta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """0.5 x^2 - 0.5 relu(|x| - delta)^2 with jax.nn.relu."""
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        x = p - t
        over = jax.nn.relu(jnp.abs(x) - delta)
        return 0.5 * x * x - 0.5 * over * over
    return loss


def custom_vjp_smooth_l1(beta: float) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """SmoothL1 with a hand-written backward through jax.custom_vjp, as users write it to control
    the gradient: where(|x| < beta, x / beta, sign(x)) * g."""
    @jax.custom_vjp
    def loss(p: jax.Array, t: jax.Array) -> jax.Array:
        return smooth_l1_where(beta)(p, t)

    def forward(p: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        return loss(p, t), p - t

    def backward(x: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array]:
        dp = jnp.where(jnp.abs(x) < beta, x / beta, jnp.sign(x)) * g
        return dp, -dp

    loss.defvjp(forward, backward)
    return loss


def l1_loss(p: jax.Array, t: jax.Array) -> jax.Array:
    return jnp.abs(p - t)


def changed_constant_loss(p: jax.Array, t: jax.Array) -> jax.Array:
    """A SmoothL1 whose quadratic divides by 0.4 where the branch switches at 0.5 (a typo)."""
    x = p - t
    ax = jnp.abs(x)
    return jnp.where(ax < 0.5, 0.5 * x * x / 0.4, ax - 0.25)


def two_mask_loss(p: jax.Array, t: jax.Array) -> jax.Array:
    """The two pieces each under its own strict mask: at |x| == 0.5 neither holds (loss and gradient 0)."""
    x = p - t
    ax = jnp.abs(x)
    return jnp.where(ax < 0.5, x * x, 0.0) + jnp.where(ax > 0.5, ax - 0.25, 0.0)


REDUCE = {"mean": jnp.mean, "sum": jnp.sum}


def grad_of(loss: Callable, reduction: str, argnums: int = 0, upcast: bool = False) -> Callable:
    """jax.grad of the reduced loss w.r.t. argument `argnums`; `upcast` computes it in float32 from
    narrower inputs (mixed precision) and casts the gradient back."""
    def reduced(p: jax.Array, t: jax.Array) -> jax.Array:
        if upcast:
            p, t = p.astype(jnp.float32), t.astype(jnp.float32)
        return REDUCE[reduction](loss(p, t))
    return jax.grad(reduced, argnums=argnums)


def vjp_of(loss: Callable, reduction: str) -> Callable:
    """jax.vjp of the loss (reduced unless "none") w.r.t. p, pulled back with the cotangent dout."""
    def fn(p: jax.Array, t: jax.Array, dout: jax.Array) -> jax.Array:
        reduce = REDUCE.get(reduction, lambda v: v)
        _, pullback = jax.vjp(lambda q: reduce(loss(q, t)), p)
        return pullback(dout)[0]
    return fn


def value_and_grad_of(loss: Callable, reduction: str) -> Callable:
    def fn(p: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.value_and_grad(lambda q: REDUCE[reduction](loss(q, t)))(p)
    return fn


def both_grads_of(loss: Callable, reduction: str) -> Callable:
    return jax.grad(lambda p, t: REDUCE[reduction](loss(p, t)), argnums=(0, 1))


# Proximal updates: out = sign(p) * max(|p| - lr*l1, 0) / (1 + lr*l2), p = var - lr*delta.

def soft_threshold(p: jax.Array, t: jax.Array | float, form: str) -> jax.Array:
    if form == "maximum":
        return jnp.sign(p) * jnp.maximum(jnp.abs(p) - t, 0.0)
    if form == "relu":
        return jnp.sign(p) * jax.nn.relu(jnp.abs(p) - t)
    if form == "clip":
        return jnp.sign(p) * jnp.clip(jnp.abs(p) - t, 0.0, None)
    if form == "where":
        return jnp.where(jnp.abs(p) > t, p - jnp.sign(p) * t, 0.0)
    if form == "residual":
        return p - jnp.clip(p, -t, t)
    raise ValueError(form)


def prox_const(form: str = "maximum") -> Callable:
    """Python-float hyperparameters: Python folds LR*L1 and 1 + LR*L2 before JAX sees them."""
    def fn(var: jax.Array, delta: jax.Array) -> jax.Array:
        p = var - LR * delta
        return soft_threshold(p, LR * L1, form) / (1 + LR * L2)
    return fn


def prox_const_in_dtype(var: jax.Array, delta: jax.Array) -> jax.Array:
    """The constant update with every constant made in var's dtype (jnp.asarray(c, var.dtype)): with
    Python-float constants on float16, jax2onnx 0.17.1 writes a graph onnxruntime refuses (a Mul of
    float32 and float16; see the float16 fixture's notes)."""
    dt = var.dtype
    p = var - jnp.asarray(LR, dt) * delta
    shrunk = jnp.sign(p) * jnp.maximum(jnp.abs(p) - jnp.asarray(LR * L1, dt), jnp.zeros((), dt))
    return shrunk / jnp.asarray(1 + LR * L2, dt)


def prox_tensor(form: str = "maximum") -> Callable:
    def fn(var: jax.Array, delta: jax.Array, lr: jax.Array, l1: jax.Array, l2: jax.Array) -> jax.Array:
        p = var - lr * delta
        return soft_threshold(p, lr * l1, form) / (1 + lr * l2)
    return fn


def prox_folded(var: jax.Array, delta: jax.Array, lr: jax.Array, threshold: jax.Array,
                divisor: jax.Array) -> jax.Array:
    return soft_threshold(var - lr * delta, threshold, "maximum") / divisor


def prox_after_optax_sgd(var: jax.Array, delta: jax.Array) -> jax.Array:
    """optax.sgd's update applied with optax.apply_updates (var + (-lr * delta)), then the shrink."""
    tx = optax.sgd(LR)
    updates, _ = tx.update(delta, tx.init(var), var)
    p = optax.apply_updates(var, updates)
    return soft_threshold(p, LR * L1, "maximum") / (1 + LR * L2)


def sgd_tensor(var: jax.Array, delta: jax.Array, lr: jax.Array) -> jax.Array:
    return var - lr * delta


def subgradient_step(var: jax.Array, delta: jax.Array, lr: jax.Array, l1: jax.Array, l2: jax.Array) -> jax.Array:
    return (var - lr * (delta + l1 * jnp.sign(var))) / (1 + lr * l2)


def shrink_without_sign(var: jax.Array, delta: jax.Array, lr: jax.Array, l1: jax.Array, l2: jax.Array) -> jax.Array:
    p = var - lr * delta
    return jnp.maximum(jnp.abs(p) - lr * l1, 0.0) / (1 + lr * l2)


# ----------------------------------------------------------------------------------------------
# The cases.

def sl1_cases() -> list[Case]:
    pt = {"predict": "p", "label": "t", "dout": 1.0}
    c = [
        Case("sl1_where_mean_b05_f32", grad_of(smooth_l1_where(0.5), "mean"), sl1_inputs(), ["grad"], "smooth_l1_grad",
             "jax.grad(lambda p, t: jnp.mean(jnp.where(|p-t| < 0.5, 0.5*(p-t)**2/0.5, |p-t| - 0.25)))(p, t)",
             "jnp.abs's derivative is where(x >= 0, 1, -1); the mean's 1/numel comes out of a ReduceSum of ones.",
             [sl1(0.5, "mean")]),
        Case("sl1_where_sum_b1_f32", grad_of(smooth_l1_where(1.0), "sum"), sl1_inputs(), ["grad"], "smooth_l1_grad",
             "jax.grad(lambda p, t: jnp.sum(jnp.where(|p-t| < 1, 0.5*(p-t)**2, |p-t| - 0.5)))(p, t)",
             "beta 1: the quadratic's /1 is kept by JAX.", [sl1(1.0, "sum")]),
        Case("sl1_where_le_sum_b2_f32", grad_of(smooth_l1_where(2.0, "le"), "sum"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(sum(jnp.where(|x| <= 2, 0.5*x**2/2, |x| - 1)))(p), x = p - t",
             "<= instead of <: both pieces agree at |x| == 2.", [sl1(2.0, "sum")]),
        Case("sl1_where_none_b05_vjp_f32", vjp_of(smooth_l1_where(0.5), "none"), sl1_inputs(dout=SL1_SHAPE),
             ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: jnp.where(|q-t| < 0.5, 0.5*(q-t)**2/0.5, |q-t| - 0.25), p)[1](dout)",
             "Elementwise loss pulled back with a full-shape cotangent dout.", [sl1(0.5, "none", "dout")]),
        Case("sl1_where_mean_b2_vjp_scalar_f32", vjp_of(smooth_l1_where(2.0), "mean"), sl1_inputs(dout=()),
             ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: jnp.mean(jnp.where(|q-t| < 2, 0.5*(q-t)**2/2, |q-t| - 1)), p)[1](dout), dout 0-D",
             "Mean loss pulled back with a 0-D cotangent.", [sl1(2.0, "mean", "dout")]),
        Case("sl1_minimum_sum_b05_f32", grad_of(smooth_l1_minimum(0.5), "sum"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(sum(0.5*q**2/0.5 + (|x| - q)))(p), q = jnp.minimum(|x|, 0.5), x = p - t",
             "No branch: the kink is in jnp.minimum, whose derivative JAX splits at the tie |x| == 0.5 "
             "(0.5 each way, which gives the same value there).", [sl1(0.5, "sum")]),
        Case("sl1_huber_maximum_mean_d1_f32", grad_of(huber_maximum(1.0), "mean"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(mean(0.5*x**2 - 0.5*jnp.maximum(|x| - 1, 0)**2))(p), x = p - t",
             "Huber (delta 1) as the quadratic minus its overshoot: the gradient is x - max(|x|-1, 0)*sign(x).",
             [sl1(1.0, "mean", scale=1.0)]),
        Case("sl1_huber_where_mean_d2_f32", grad_of(huber_where(2.0), "mean"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(mean(jnp.where(|x| <= 2, 0.5*x**2, 2*(|x| - 1))))(p), x = p - t",
             "Huber gradient = delta * SmoothL1 gradient with sigma = delta: scale 2.", [sl1(2.0, "mean", scale=2.0)]),
        Case("sl1_optax_huber_mean_d1_f32", grad_of(optax_huber(1.0), "mean"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(lambda p, t: jnp.mean(optax.huber_loss(p, t, delta=1.0)))(p, t)",
             "optax.huber_loss: q = min(|x|, delta), 0.5 q**2 + delta*(|x| - q); JAX's tie-split derivative of "
             "jnp.minimum appears as Equal/Where/Div.", [sl1(1.0, "mean")]),
        Case("sl1_optax_huber_sum_d05_f32", grad_of(optax_huber(0.5), "sum"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(lambda p, t: jnp.sum(optax.huber_loss(p, t, delta=0.5)))(p, t)",
             "Huber delta 0.5: scale 0.5 on the SmoothL1 gradient with sigma 0.5.", [sl1(0.5, "sum", scale=0.5)]),
        Case("sl1_optax_huber_none_d05_vjp_f16", vjp_of(optax_huber(0.5), "none"),
             sl1_inputs("float16", dout=SL1_SHAPE), ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: optax.huber_loss(q, t, delta=0.5), p)[1](dout) on float16",
             "Computed in float16 throughout.", [sl1(0.5, "none", "dout", scale=0.5)], dtype="float16"),
        Case("sl1_where_mean_b05_f16", grad_of(smooth_l1_where(0.5), "mean"), sl1_inputs("float16"), ["grad"],
             "smooth_l1_grad", "jax.grad(mean(jnp.where(|x| < 0.5, 0.5*x**2/0.5, |x| - 0.25)))(p) on float16",
             "Computed in float16 throughout.", [sl1(0.5, "mean")], dtype="float16"),
        Case("sl1_where_sum_b05_bf16_upcast", grad_of(smooth_l1_where(0.5), "sum", upcast=True),
             sl1_inputs("bfloat16"), ["grad"], "smooth_l1_grad",
             "jax.grad(lambda p, t: jnp.sum(smooth_l1(p.astype(f32), t.astype(f32), 0.5)))(p, t), p, t bfloat16",
             "Mixed precision: bfloat16 parameters, the loss in float32, the gradient cast back to bfloat16 "
             "(onnxruntime's CPU provider has no bfloat16 Sub/Abs, so a graph computing in bfloat16 would not run).",
             [sl1(0.5, "sum")], dtype="bfloat16"),
        Case("sl1_where_mean_b05_label_grad_f32", grad_of(smooth_l1_where(0.5), "mean", argnums=1), sl1_inputs(),
             ["grad"], "smooth_l1_grad", "jax.grad(mean(smooth_l1(p, t, 0.5)), argnums=1)(p, t): w.r.t. the label",
             "The gradient w.r.t. t is the SmoothL1 gradient with predict and label swapped.",
             [sl1(0.5, "mean", predict="t", label="p")]),
        Case("sl1_where_mean_b05_value_and_grad_f32", value_and_grad_of(smooth_l1_where(0.5), "mean"), sl1_inputs(),
             ["loss", "grad"], "smooth_l1_grad",
             "jax.value_and_grad(lambda q: jnp.mean(smooth_l1(q, t, 0.5)))(p): forward loss and gradient",
             "The forward loss shares x = p - t and |x| (and the compare) with the gradient.", [sl1(0.5, "mean")]),
        Case("sl1_optax_huber_both_grads_sum_d1_f32", both_grads_of(optax_huber(1.0), "sum"), sl1_inputs(),
             ["grad_p", "grad_t"], "smooth_l1_grad",
             "jax.grad(lambda p, t: jnp.sum(optax.huber_loss(p, t, delta=1.0)), argnums=(0, 1))(p, t)",
             "Two instances sharing one forward: grad_t is the gradient with predict and label swapped "
             "(JAX writes it as Neg of grad_p's cotangent).",
             [sl1(1.0, "sum", output="grad_p"), sl1(1.0, "sum", output="grad_t", predict="t", label="p")]),
    ]
    # SmoothL1 built with jnp.clip: exact at x = +beta, but at x = -beta the two tie-split
    # derivatives (clip's and |x - c|'s at 0, which JAX takes as +1) give 0, not -1.
    clip_inst = sl1(0.5, "sum")
    c += [
        Case("sl1_huber_relu_sum_d05_f32", grad_of(huber_relu(0.5), "sum"), sl1_inputs(), ["grad"], "smooth_l1_grad",
             "jax.grad(sum(0.5*x**2 - 0.5*jax.nn.relu(|x| - 0.5)**2))(p), x = p - t",
             "Huber delta 0.5 with the overshoot through jax.nn.relu: scale 0.5.", [sl1(0.5, "sum", scale=0.5)]),
        Case("sl1_custom_vjp_mean_b05_f32", grad_of(custom_vjp_smooth_l1(0.5), "mean"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(mean(f(p, t)))(p), f a jax.custom_vjp whose backward is "
             "jnp.where(|x| < 0.5, x / 0.5, jnp.sign(x)) * g",
             "The backward as written by hand in a custom_vjp; g is the mean's cotangent 1/numel, broadcast.",
             [sl1(0.5, "mean")]),
        Case("sl1_where_none_b1_vjp_f16", vjp_of(smooth_l1_where(1.0), "none"), sl1_inputs("float16", dout=SL1_SHAPE),
             ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: jnp.where(|q-t| < 1, 0.5*(q-t)**2, |q-t| - 0.5), p)[1](dout) on float16",
             "Computed in float16 throughout; beta 1.", [sl1(1.0, "none", "dout")], dtype="float16"),
        Case("sl1_where_mean_b05_row_target_f32", grad_of(smooth_l1_where(0.5), "mean"),
             {"p": (SL1_SHAPE, "float32"), "t": ((SL1_SHAPE[1],), "float32")}, ["grad"], "smooth_l1_grad",
             "jax.grad(mean(jnp.where(|x| < 0.5, 0.5*x**2/0.5, |x| - 0.25)))(p), x = p - t, t of shape [5]",
             "The label broadcasts along the rows (one target per feature); the mean is over predict's 20.",
             [sl1(0.5, "mean")]),
        Case("sl1_optax_huber_mean_d1_op17_f32", grad_of(optax_huber(1.0), "mean"), sl1_inputs(), ["grad"],
             "smooth_l1_grad", "jax.grad(lambda p, t: jnp.mean(optax.huber_loss(p, t, delta=1.0)))(p, t), "
             "to_onnx(..., opset=17)", "As sl1_optax_huber_mean_d1_f32 at opset 17.", [sl1(1.0, "mean")],
             opset=17),
    ]
    c.append(Case("nm_sl1_clip_tie_sum_b05_f32", grad_of(smooth_l1_clip(0.5), "sum"), sl1_inputs(), ["grad"],
                  "near_miss", "jax.grad(sum(0.5*c**2/0.5 + |x - c|))(p), c = jnp.clip(x, -0.5, 0.5), x = p - t",
                  "Near miss at a tie: SmoothL1 with sigma 0.5 everywhere except x == -0.5, where JAX's derivative "
                  "of jnp.clip (0.5 at the tie) and of |x - c| at 0 (+1) add to 0 instead of -1. "
                  "A part of it, the quadratic term's derivative "
                  "through jnp.clip, is itself a SmoothL1 gradient (sigma 0.5, scale 0.25, dout an intermediate); "
                  "fusing that part keeps the values, fusing the whole output as SmoothL1(0.5) does not.",
                  near_misses=[near_miss("smooth_l1_grad_zero_at_minus_sigma", dict(pt), clip_inst, "grad",
                                         reduction="sum", sigma=0.5)]))
    c += [
        Case("nm_l1_mean_f32", grad_of(l1_loss, "mean"), sl1_inputs(), ["grad"], "near_miss",
             "jax.grad(lambda p, t: jnp.mean(jnp.abs(p - t)))(p, t): the L1 loss",
             "Near miss: an L1 gradient, where(x >= 0, 1, -1)/numel; differs from SmoothL1(sigma=0) at x == 0.",
             near_misses=[near_miss("l1_grad_sign_ge", dict(pt), sl1(0.0, "mean"), "grad", reduction="mean")]),
        Case("nm_sl1_changed_constant_mean_f32", grad_of(changed_constant_loss, "mean"), sl1_inputs(), ["grad"],
             "near_miss", "jax.grad(mean(jnp.where(|x| < 0.5, 0.5*x**2/0.4, |x| - 0.25)))(p), x = p - t",
             "Near miss: the quadratic's divisor 0.4 does not match the breakpoint 0.5 (slope 2.5 inside, a jump at "
             "|x| == 0.5).",
             near_misses=[near_miss("select_grad", dict(pt), sl1(0.5, "mean"), "grad", reduction="mean",
                                    threshold=0.5, inner_slope=2.5, outer=1.0)]),
        Case("nm_sl1_two_masks_tie_sum_b05_f32", grad_of(two_mask_loss, "sum"), sl1_inputs(), ["grad"], "near_miss",
             "jax.grad(sum(jnp.where(|x| < 0.5, x**2, 0) + jnp.where(|x| > 0.5, |x| - 0.25, 0)))(p), x = p - t",
             "Near miss: SmoothL1(sigma 0.5) except at |x| == 0.5, where neither strict mask holds and the "
             "gradient is 0 instead of +-1.",
             near_misses=[near_miss("two_mask_grad", dict(pt), sl1(0.5, "sum"), "grad", reduction="sum", sigma=0.5)]),
    ]
    return c


def prox_cases() -> list[Case]:
    tensor = prox("raw", "lr", "l1", "l2")
    scalars = ("lr", "l1", "l2")
    const = prox("folded", stored(LR), stored(LR * L1), stored(1 + LR * L2))
    const_src = f"p = var - {LR}*delta; {{shrink}} / (1 + {LR}*{L2}) with t = {LR}*{L1} (Python floats)"
    c = [Case(f"prox_const_{form}_f32", prox_const(form), prox_inputs(), ["var_out"], "proximal_gd",
              const_src.format(shrink=shrink), "Python folds lr*l1 and 1 + lr*l2: threshold and divisor constants.",
              [const])
         for form, shrink in [("maximum", "jnp.sign(p) * jnp.maximum(jnp.abs(p) - t, 0)"),
                              ("relu", "jnp.sign(p) * jax.nn.relu(jnp.abs(p) - t)"),
                              ("clip", "jnp.sign(p) * jnp.clip(jnp.abs(p) - t, 0, None)"),
                              ("where", "jnp.where(jnp.abs(p) > t, p - jnp.sign(p)*t, 0)"),
                              ("residual", "p - jnp.clip(p, -t, t)")]]
    c += [
        Case("prox_tensor_maximum_f32", prox_tensor("maximum"), prox_inputs(scalars=scalars), ["var_out"],
             "proximal_gd", "p = var - lr*delta; jnp.sign(p) * jnp.maximum(jnp.abs(p) - lr*l1, 0) / (1 + lr*l2)",
             "lr, l1, l2 are 0-D runtime inputs.", [tensor]),
        Case("prox_tensor_where_f32", prox_tensor("where"), prox_inputs(scalars=scalars), ["var_out"], "proximal_gd",
             "p = var - lr*delta; jnp.where(jnp.abs(p) > lr*l1, p - jnp.sign(p)*lr*l1, 0) / (1 + lr*l2)",
             "Softshrink by jnp.where with runtime scalars. NaN in p gives 0 here (the where's 0 branch), "
             "NaN in the fused op: the same difference as exporters/nm_prox_where_zeros_f32_dynopt, kept a near "
             "miss there; listed as an instance here because it equals the update on every finite input.",
             [tensor]),
        Case("prox_folded_f32", prox_folded, prox_inputs(scalars=("lr", "threshold", "divisor")), ["var_out"],
             "proximal_gd", "jnp.sign(p) * jnp.maximum(jnp.abs(p) - threshold, 0) / divisor, p = var - lr*delta",
             "Threshold and divisor already folded, as runtime inputs.",
             [prox("folded", "lr", "threshold", "divisor")]),
        Case("prox_const_maximum_f16", prox_const_in_dtype, prox_inputs("float16"), ["var_out"], "proximal_gd",
             "p = var - c(0.1)*delta; jnp.sign(p) * jnp.maximum(jnp.abs(p) - c(0.001), jnp.zeros((), dt)) / c(1.005), "
             "c = lambda v: jnp.asarray(v, var.dtype), on float16",
             "Computed in float16; the constants are float16. Exporter limit measured: the same update with "
             "Python-float constants (as prox_const_maximum_f32) exports from jax2onnx 0.17.1 as a graph that "
             "onnxruntime refuses: 'Type parameter (T) of Optype (Mul) bound to different types (tensor(float) "
             "and tensor(float16))' (Cast(Sign(p)) to float32, and a float32 divisor).",
             [prox("folded", stored(LR, "float16"), stored(LR * L1, "float16"), stored(1 + LR * L2, "float16"))],
             dtype="float16"),
        Case("prox_optax_sgd_f32", prox_after_optax_sgd, prox_inputs(), ["var_out"], "proximal_gd",
             f"p = optax.apply_updates(var, optax.sgd({LR}).update(delta, ...)[0]); "
             f"jnp.sign(p) * jnp.maximum(jnp.abs(p) - {LR}*{L1}, 0) / (1 + {LR}*{L2})",
             "optax has no proximal or soft-threshold transform (optax 0.2.8); the step is optax.sgd's "
             "var + (-lr * delta), then the shrink in jnp.", [const]),
        Case("nm_sgd_tensor_f32", sgd_tensor, prox_inputs(scalars=("lr",)), ["var_out"], "near_miss",
             "var - lr*delta", "Near miss: plain SGD, no shrink.",
             near_misses=[near_miss("sgd", {"var": "var", "alpha": "lr", "delta": "delta"},
                                    prox("raw", "lr", 0.0, 0.0), "var_out")
                          | {"same_values_but": "no shrink: plain SGD is not a proximal update (DESIGN section 2)"}]),
        Case("nm_prox_subgradient_f32", subgradient_step, prox_inputs(scalars=scalars), ["var_out"], "near_miss",
             "(var - lr*(delta + l1*jnp.sign(var))) / (1 + lr*l2)",
             "Near miss: the L1 penalty's subgradient step, which does not snap small weights to 0.",
             near_misses=[near_miss("l1_subgradient_step",
                                    {"var": "var", "alpha": "lr", "l1": "l1", "l2": "l2", "delta": "delta"},
                                    tensor, "var_out")]),
        Case("nm_prox_no_sign_f32", shrink_without_sign, prox_inputs(scalars=scalars), ["var_out"], "near_miss",
             "jnp.maximum(jnp.abs(p) - lr*l1, 0) / (1 + lr*l2), p = var - lr*delta",
             "Near miss: the shrink without sign(p) (wrong for negative p).",
             near_misses=[near_miss("shrink_without_sign",
                                    {"var": "var", "alpha": "lr", "l1": "l1", "l2": "l2", "delta": "delta"},
                                    tensor, "var_out")]),
    ]
    return c


# ----------------------------------------------------------------------------------------------
# Keras 3 on the JAX backend: the Huber loss as Keras computes it (in the loss's dtype, its mean over
# the last axis in float32), pulled back by jax.vjp.

def keras_ops_huber(t: jax.Array, q: jax.Array, delta: float = 1.0) -> jax.Array:
    """The Huber loss written with keras.ops, as a custom Keras loss would be."""
    x = q - t
    ax = keras.ops.abs(x)
    return keras.ops.where(ax <= delta, 0.5 * keras.ops.square(x), delta * ax - 0.5 * delta**2)


def keras_vjp(loss: Callable[[jax.Array, jax.Array], jax.Array]) -> Callable:
    """jax.vjp of a Keras loss(y_true, y_pred) w.r.t. the prediction, pulled back with dout."""
    def fn(p: jax.Array, t: jax.Array, dout: jax.Array) -> jax.Array:
        _, pullback = jax.vjp(lambda q: loss(t, q), p)
        return pullback(dout)[0]
    return fn


def _keras_upstream(model: onnx.ModelProto) -> str:
    """The float16 cotangent the loss's gradient reaches the select with: Keras' mean over the last
    axis, dout / 5 computed in float32, broadcast and cast to float16 (the Cast that reads a Where)."""
    return next(n.output[0] for n in model.graph.node if n.op_type == "Cast"
                and any(n.input[0] in w.output for w in model.graph.node if w.op_type == "Where"))


def keras_cases() -> list[Case]:
    inv_d = stored(1 / SL1_SHAPE[1])
    form = ("Sum(Sum(Mul(Mul(0.5, Where(le, g, 0)), Mul(2, x)), Where(ge, Mul(delta, Where(le, 0, g)), 0)), "
            "Neg(Where(ge, 0, Mul(delta, Where(le, 0, g))))), le = LessOrEqual(|x|, delta), ge = GreaterOrEqual(x, 0)"
            ": JAX's gradients of jnp.where and |x| (+1 at x = 0)")
    return [
        Case("sl1_keras_huber_sum_d1_vjp_f16", keras_vjp(keras.losses.Huber(delta=1.0, reduction="sum",
                                                                            dtype="float16")),
             sl1_inputs("float16", dout=()), ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: keras.losses.Huber(delta=1.0, reduction='sum', dtype='float16')(t, q), p)[1](dout) "
             "on float16, KERAS_BACKEND=jax",
             f"{form}, g = Cast<float16>(Expand(Div(Cast<float32>(dout), 5))): Keras averages over the last axis "
             "in float32. Reduction 'sum', scale 1/5, dout the 0-D cotangent. Exporter limit measured: the "
             "default reduction 'sum_over_batch_size' does not export with jax2onnx 0.17.1 (keras' "
             "divide_no_nan under jax2onnx's jnp.where JVP rule: 'dtype=float0 is not a valid dtype for JAX "
             "type promotion').", [sl1(1.0, "sum", "dout", scale=inv_d)], dtype="float16"),
        Case("sl1_keras_huber_fn_none_d05_vjp_f16", keras_vjp(lambda t, q: keras.losses.huber(t, q, delta=0.5)),
             sl1_inputs("float16", dout=(SL1_SHAPE[0],)), ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: keras.losses.huber(t, q, delta=0.5), p)[1](dout) on float16, dout per sample [4], "
             "KERAS_BACKEND=jax",
             f"{form}: the per-sample loss's cotangent dout [4] divided by 5 in float32, broadcast to [4, 5] and "
             "cast to float16 is the g every element reads (the instance's dout). Huber delta 0.5: scale 0.5.",
             lambda m: [sl1(0.5, "none", _keras_upstream(m), scale=0.5)], dtype="float16"),
        Case("sl1_keras_ops_huber_mean_d1_vjp_f16", keras_vjp(lambda t, q: keras.ops.mean(keras_ops_huber(t, q))),
             sl1_inputs("float16", dout=()), ["grad"], "smooth_l1_grad",
             "jax.vjp(lambda q: keras.ops.mean(keras.ops.where(|q-t| <= 1, 0.5*(q-t)**2, |q-t| - 0.5)), p)[1](dout) "
             "on float16, KERAS_BACKEND=jax",
             f"{form}, g = Cast<float16>(Expand(Div(Cast<float32>(dout), 20))): the mean's cotangent computed in "
             "float32 by keras.ops.mean. Reduction 'mean', dout the 0-D cotangent.",
             [sl1(1.0, "mean", "dout")], dtype="float16"),
    ]


# ----------------------------------------------------------------------------------------------

def mixed_cases() -> list[Case]:
    inputs = {"W": ((5,), "float32"), "b": ((5,), "float32"), "x": ((4, 5), "float32"), "t": ((4, 5), "float32"),
              **{s: ((), "float32") for s in ("lr", "l1", "l2")}}
    return [Case("mixed_scale_step_mean_b05_f32", scale_step, inputs, ["W_new", "b_new"], "mixed",
                 "gW, gb = jax.grad(lambda W, b: jnp.mean(smooth_l1(x * W + b, t, 0.5)), argnums=(0, 1))(W, b); "
                 "W_new, b_new = prox(W, gW), prox(b, gb) with p = v - lr*g, "
                 "jnp.sign(p) * jnp.maximum(jnp.abs(p) - lr*l1, 0) / (1 + lr*l2)",
                 "One training step of a per-feature scale and bias: the SmoothL1 gradient w.r.t. the prediction "
                 "(an intermediate) feeds the Mul and ReduceSum of the weight and bias gradients, which feed two "
                 "proximal updates sharing lr*l1 and lr*l2. Exporter limit measured: the same step with a matrix "
                 "x @ W (x [4,3], W [3,5]) exports from jax2onnx 0.17.1 as a graph onnxruntime refuses: the "
                 "weight gradient's Gemm(g, x) contracts axis 0 without transA ('Dimension mismatch in "
                 "unification between 4 and 5').", scale_step_instances)]


def scale_step(W: jax.Array, b: jax.Array, x: jax.Array, t: jax.Array, lr: jax.Array, l1: jax.Array,
                l2: jax.Array) -> tuple[jax.Array, jax.Array]:
    def loss(W: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.mean(smooth_l1_where(0.5)(x * W + b, t))
    gW, gb = jax.grad(loss, argnums=(0, 1))(W, b)
    update = prox_tensor("maximum")
    return update(W, gW, lr, l1, l2), update(b, gb, lr, l1, l2)


def _input_beside(model: onnx.ModelProto, op_type: str, known: str) -> str:
    """The other input of the last `op_type` node (in graph order) that reads `known` with one other input."""
    *_, node = [n for n in model.graph.node if n.op_type == op_type and known in n.input and len(n.input) == 2]
    return next(i for i in node.input if i != known)


def scale_step_instances(model: onnx.ModelProto) -> list[dict]:
    """The SmoothL1 gradient is the operand beside x of the backward's Mul (the weight gradient's
    g * x before its ReduceSum, after the forward's x * W); the deltas are what lr multiplies
    before each Sub from W and b."""
    grad = _input_beside(model, "Mul", "x")
    predict = _input_beside(model, "Sub", "t")
    deltas = {}
    for var in ("W", "b"):
        scaled = _input_beside(model, "Sub", var)
        producer = next(n for n in model.graph.node if scaled in n.output)
        deltas[var] = next(i for i in producer.input if i != "lr")
    return [sl1(0.5, "mean", output=grad, predict=predict),
            *({"op": PROX, "scalar_form": "raw", "output": f"{var}_new",
               "inputs": {"var": var, "alpha": "lr", "l1": "l1", "l2": "l2", "delta": deltas[var]}}
              for var in ("W", "b"))]


def export(case: Case) -> onnx.ModelProto:
    args = [jax.ShapeDtypeStruct(shape, JNP_DTYPES[dtype]) for shape, dtype in case.inputs.values()]
    opset = {"opset": case.opset} if case.opset else {}
    return to_onnx(case.fn, args, model_name=case.name, input_names=list(case.inputs), output_names=case.outputs,
                   **opset)


def entry_for(case: Case, model: onnx.ModelProto) -> dict:
    opset = {o.domain: o.version for o in model.opset_import}[""]
    inputs = {}
    for name, (shape, dtype) in case.inputs.items():
        spec: dict = {"shape": list(shape), "dtype": dtype}
        if name in SCALAR_RANGES:
            spec["range"] = list(SCALAR_RANGES[name])
        inputs[name] = spec
    attrs = case.attrs(model) if callable(case.attrs) else case.attrs
    expected = {op: sum(1 for a in attrs if a["op"] == op) for op in (SL1, PROX)}
    keras_made = case.name.startswith("sl1_keras")
    entry = {"exporter": "keras + jax2onnx" if keras_made else "jax2onnx",
             "exporter_version": KERAS_VERSION if keras_made else EXPORTER_VERSION, "opset": opset,
             "family": case.family,
             "source": case.source, "expected": expected, "attrs": attrs, "dtype": case.dtype,
             "dynamic": False, "inputs": inputs, "notes": case.notes}
    if case.near_misses:
        entry["near_misses"] = case.near_misses
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="generate only the cases whose name contains this")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    checker = load_new_exporter_checker()
    old = {e["file"]: e for e in json.loads(MANIFEST.read_text(encoding="utf-8"))} if MANIFEST.exists() else {}
    entries, rows = [], []
    for case in sl1_cases() + prox_cases() + mixed_cases() + keras_cases():
        if opts.only not in case.name:
            if case.file in old:
                entries.append(old[case.file])
            continue
        model = export(case)
        entry = record_new_exporter_fixture(case.file, model, entry_for(case, model), checker)
        keep_fusion_status(entry, old.get(case.file))
        entries.append(entry)
        rows.append((case.name, entry["size_bytes"], ops_histogram(model)))
    write_new_exporter_manifest(MANIFEST, FIXTURES, entries, rows, prune=not opts.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
