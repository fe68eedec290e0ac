"""Regenerate the PaddlePaddle fixtures in tests/fixtures/paddle/ (with their manifest.json).

Every graph here is what paddle2onnx writes for a static Paddle program (paddle.jit.to_static,
paddle.jit.save) that computes the SmoothL1/Huber backward the way Paddle users get it: paddle.grad
of a loss inside the program, with Paddle's composite-op decomposition on
(core._set_prim_all_enabled), which turns the backward ops (abs_grad, where_grad, ...) into
primitive ops that paddle2onnx converts, or a backward written by hand in paddle ops (as a
PyLayer's backward would be); and the proximal update in paddle ops, F.softshrink included. Near
misses look alike and compute something else. paddle2onnx aborts the process on an operator it
cannot convert, so each conversion runs in a child process, and the paths that fail are recorded
in the notes of the fixture that works around them. Each fixture is checked right after export
with check_new_entry() of tests/lowering/new_exporter_check.py.

Paddle's F.smooth_l1_loss(input, label, delta=d) is the Huber loss by default (is_huber=True:
0.5 x^2 inside |x| < d, d |x| - 0.5 d^2 outside), whose gradient is d * SmoothL1'(sigma=d); with
is_huber=False it is PyTorch's SmoothL1 with beta = d.

Needs paddlepaddle (3.3.1), paddle2onnx (2.1.0) with polygraphy, onnx_graphsurgeon and sympy (its
default constant folding), onnxruntime and ml_dtypes; the project is imported from this
checkout, not installed.
Usage (in a separate environment: python -m venv /tmp/venv-paddle && /tmp/venv-paddle/bin/pip install
paddlepaddle paddle2onnx onnx_graphsurgeon sympy onnxruntime ml_dtypes):
/tmp/venv-paddle/bin/python models/make_paddle_models.py
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("GLOG_minloglevel", "3")
warnings.filterwarnings("ignore")

import onnx  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from fixture_common import (  # noqa: E402
    keep_fusion_status,
    load_new_exporter_checker,
    ops_histogram,
    record_new_exporter_fixture,
    write_new_exporter_manifest,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/paddle")
MANIFEST = REPO / FIXTURES / "manifest.json"

SL1 = "SmoothL1LossGradV2"
PROX = "ApplyProximalGradientDescent"
SL1_SHAPE, PROX_SHAPE = [4, 5], [8, 16]
OPSET = 17
LR, L1, L2 = 0.1, 0.01, 0.05
SCALAR_RANGES = {"lr": (0.05, 0.2), "l1": (0.005, 0.05), "l2": (0.01, 0.1)}
EXPORTER_VERSION = f"paddlepaddle {version('paddlepaddle')}, paddle2onnx {version('paddle2onnx')}"
RUN_BATCH = 7


@dataclass
class Case:
    name: str
    fn: Callable[..., object]
    inputs: dict[str, list[int | None]]  # graph input name -> shape (None: unknown dim), float32
    family: str
    source: str
    notes: str
    attrs: list[dict] = field(default_factory=list)
    near_misses: list[dict] = field(default_factory=list)
    prim: bool = True

    @property
    def file(self) -> str:
        return str(FIXTURES / f"{self.name}.onnx")

    @property
    def expected(self) -> dict[str, int]:
        return {op: sum(1 for a in self.attrs if a["op"] == op) for op in (SL1, PROX)}

    @property
    def dynamic(self) -> bool:
        return any(None in shape for shape in self.inputs.values())


def sl1(sigma: float, reduction: str, dout: str | float = 1.0, scale: float = 1.0, output: str = "fetch_name_0",
        predict: str = "p", label: str = "t") -> dict:
    return {"op": SL1, "sigma": sigma, "reduction": reduction, "scale": scale,
            "inputs": {"predict": predict, "label": label, "dout": dout}, "output": output}


def prox(scalar_form: str, alpha: str | float, l1: str | float, l2: str | float) -> dict:
    return {"op": PROX, "scalar_form": scalar_form,
            "inputs": {"var": "var", "alpha": alpha, "l1": l1, "l2": l2, "delta": "delta"}, "output": "fetch_name_0"}


def near_miss(formula: str, inputs: dict, resembles: dict, **params: object) -> dict:
    return {"output": resembles["output"], "formula": formula, "inputs": inputs, "params": params,
            "resembles": resembles}


def stored(value: float) -> float:
    return float(paddle.to_tensor(value, dtype="float32").item())


# ----------------------------------------------------------------------------------------------
# Losses (elementwise) and their gradients as Paddle programs.

def huber(delta: float) -> Callable:
    """Paddle's own Huber spelling (smooth_l1_loss with is_huber): 0.5 x^2, delta |x| - 0.5 delta^2."""
    def loss(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
        x = p - t
        ax = paddle.abs(x)
        return paddle.where(ax < delta, 0.5 * x * x, delta * ax - 0.5 * delta * delta)
    return loss


def smooth_l1(beta: float, compare: str = "lt", divisor: float | None = None) -> Callable:
    """PyTorch's SmoothL1 (Paddle's is_huber=False): 0.5 x^2 / beta inside, |x| - 0.5 beta outside."""
    def loss(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
        x = p - t
        ax = paddle.abs(x)
        inside = ax < beta if compare == "lt" else ax <= beta
        return paddle.where(inside, 0.5 * x * x / (divisor or beta), ax - 0.5 * beta)
    return loss


def huber_minimum(delta: float) -> Callable:
    """q = minimum(|x|, delta): 0.5 q^2 + delta (|x| - q), as optax writes it."""
    def loss(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
        ax = paddle.abs(p - t)
        q = paddle.minimum(ax, paddle.full_like(ax, delta))
        return 0.5 * q * q + delta * (ax - q)
    return loss


def two_mask_loss(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
    x = p - t
    ax = paddle.abs(x)
    return (ax < 0.5).astype("float32") * x * x + (ax > 0.5).astype("float32") * (ax - 0.25)


def l1_loss(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
    return paddle.abs(p - t)


def grad_sum(loss: Callable, numel_mean: bool = False) -> Callable:
    """paddle.grad of loss.sum() (divided by numel for a mean: paddle2onnx cannot convert the
    decomposed mean's gradient, see the notes)."""
    def fn(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
        p.stop_gradient = False
        total = loss(p, t).sum()
        return paddle.grad(total / p.numel() if numel_mean else total, p)[0]
    return fn


def value_and_grad_sum(loss: Callable) -> Callable:
    """The summed loss and its gradient: the forward's x and |x| are read by both."""
    def fn(p: paddle.Tensor, t: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        p.stop_gradient = False
        total = loss(p, t).sum()
        return total, paddle.grad(total, p)[0]
    return fn


def grad_mean(loss: Callable) -> Callable:
    def fn(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
        p.stop_gradient = False
        return paddle.grad(loss(p, t).mean(), p)[0]
    return fn


def grad_vjp(loss: Callable) -> Callable:
    """paddle.grad of the unreduced loss with grad_outputs=dout."""
    def fn(p: paddle.Tensor, t: paddle.Tensor, dout: paddle.Tensor) -> paddle.Tensor:
        p.stop_gradient = False
        return paddle.grad(loss(p, t), p, grad_outputs=dout)[0]
    return fn


def functional_grad(p: paddle.Tensor, t: paddle.Tensor) -> paddle.Tensor:
    p.stop_gradient = False
    return paddle.grad(F.smooth_l1_loss(p, t, reduction="sum", delta=0.5), p)[0]


def hand_backward_where(p: paddle.Tensor, t: paddle.Tensor, dout: paddle.Tensor) -> paddle.Tensor:
    """A PyLayer-style backward by hand: where(|x| < 0.5, x / 0.5, sign(x)) * dout / numel."""
    x = p - t
    return paddle.where(paddle.abs(x) < 0.5, x / 0.5, paddle.sign(x)) * dout / x.numel().astype("float32")


def hand_backward_clip(p: paddle.Tensor, t: paddle.Tensor, dout: paddle.Tensor) -> paddle.Tensor:
    """The Huber backward by hand: clip(x, -2, 2) * dout."""
    return paddle.clip(p - t, -2.0, 2.0) * dout


def scale_step(W: paddle.Tensor, b: paddle.Tensor, x: paddle.Tensor, t: paddle.Tensor, lr: paddle.Tensor,
               l1: paddle.Tensor, l2: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
    """A training step of a per-feature scale and bias (x * W + b, W and b of shape [5]) with the
    Huber loss, then the proximal update of both."""
    W.stop_gradient = False
    b.stop_gradient = False
    gW, gb = paddle.grad(huber(0.5)(x * W + b, t).sum(), [W, b])
    update = prox_tensor("maximum")
    return update(W, gW, lr, l1, l2), update(b, gb, lr, l1, l2)


# Proximal updates.

def prox_const(form: str) -> Callable:
    def fn(var: paddle.Tensor, delta: paddle.Tensor) -> paddle.Tensor:
        p = var - LR * delta
        t = LR * L1
        if form == "softshrink":
            shrunk = F.softshrink(p, threshold=t)
        elif form == "relu":
            shrunk = paddle.sign(p) * F.relu(paddle.abs(p) - t)
        else:
            shrunk = paddle.sign(p) * paddle.clip(paddle.abs(p) - t, min=0.0)
        return shrunk / (1 + LR * L2)
    return fn


def prox_tensor(form: str) -> Callable:
    def fn(var: paddle.Tensor, delta: paddle.Tensor, lr: paddle.Tensor, l1: paddle.Tensor,
           l2: paddle.Tensor) -> paddle.Tensor:
        p = var - lr * delta
        if form == "maximum":
            shrunk = paddle.sign(p) * paddle.maximum(paddle.abs(p) - lr * l1, paddle.zeros_like(p))
        else:
            shrunk = paddle.sign(p) * F.relu(paddle.abs(p) - lr * l1)
        return shrunk / (1 + lr * l2)
    return fn


def sgd(var: paddle.Tensor, delta: paddle.Tensor, lr: paddle.Tensor) -> paddle.Tensor:
    return var - lr * delta


def subgradient_step(var: paddle.Tensor, delta: paddle.Tensor, lr: paddle.Tensor, l1: paddle.Tensor,
                     l2: paddle.Tensor) -> paddle.Tensor:
    return (var - lr * (delta + l1 * paddle.sign(var))) / (1 + lr * l2)


def softshrink_unscaled_sign(var: paddle.Tensor, delta: paddle.Tensor) -> paddle.Tensor:
    """F.softshrink of var - lr*delta with its threshold, then the divisor applied to var's sign only:
    not a proximal update (sign(var) * shrink magnitude)."""
    p = var - LR * delta
    return paddle.sign(var) * paddle.abs(F.softshrink(p, threshold=LR * L1)) / (1 + LR * L2)


# ----------------------------------------------------------------------------------------------

def sl1_cases() -> list[Case]:
    pt = {"p": SL1_SHAPE, "t": SL1_SHAPE}
    ptd = {**pt, "dout": SL1_SHAPE}
    bind = {"predict": "p", "label": "t", "dout": 1.0}
    return [
        Case("sl1_huber_sum_d05", grad_sum(huber(0.5)), pt, "smooth_l1_grad",
             "paddle.grad(paddle.where(|x| < 0.5, 0.5*x**2, 0.5*|x| - 0.125).sum(), p), x = p - t",
             "Paddle's Huber (the formula of F.smooth_l1_loss(delta=0.5)) by hand: gradient 0.5 * SmoothL1'(0.5).",
             [sl1(0.5, "sum", scale=0.5)]),
        Case("sl1_huber_mean_by_numel_d1", grad_sum(huber(1.0), numel_mean=True), pt, "smooth_l1_grad",
             "paddle.grad(paddle.where(|x| < 1, 0.5*x**2, |x| - 0.5).sum() / p.numel(), p), x = p - t",
             "A mean written as sum / numel.", [sl1(1.0, "mean")]),
        Case("sl1_huber_none_vjp_d2", grad_vjp(huber(2.0)), ptd, "smooth_l1_grad",
             "paddle.grad(paddle.where(|x| < 2, 0.5*x**2, 2*|x| - 2), p, grad_outputs=dout), x = p - t",
             "Unreduced loss pulled back with dout: scale 2.", [sl1(2.0, "none", "dout", scale=2.0)]),
        Case("sl1_huber_value_and_grad_sum_d1", value_and_grad_sum(huber(1.0)), pt, "smooth_l1_grad",
             "total = paddle.where(|x| < 1, 0.5*x**2, |x| - 0.5).sum(); return total, paddle.grad(total, p)",
             "The forward loss (fetch_name_0) and the gradient (fetch_name_1) share x = p - t and |x|.",
             [sl1(1.0, "sum", output="fetch_name_1")]),
        Case("sl1_torchstyle_sum_b05", grad_sum(smooth_l1(0.5)), pt, "smooth_l1_grad",
             "paddle.grad(paddle.where(|x| < 0.5, 0.5*x**2/0.5, |x| - 0.25).sum(), p): "
             "F.smooth_l1_loss(is_huber=False)",
             "PyTorch's SmoothL1 definition in paddle ops.", [sl1(0.5, "sum")]),
        Case("sl1_torchstyle_le_none_vjp_b1", grad_vjp(smooth_l1(1.0, "le")), ptd, "smooth_l1_grad",
             "paddle.grad(paddle.where(|x| <= 1, 0.5*x**2, |x| - 0.5), p, grad_outputs=dout)",
             "<= at beta 1.", [sl1(1.0, "none", "dout")]),
        Case("sl1_huber_minimum_sum_d05", grad_sum(huber_minimum(0.5)), pt, "smooth_l1_grad",
             "paddle.grad((0.5*q**2 + 0.5*(|x| - q)).sum(), p), q = paddle.minimum(|x|, 0.5)",
             "The kink in paddle.minimum; whichever operand Paddle's minimum gradient credits at the tie "
             "|x| == 0.5, the value there is the same.", [sl1(0.5, "sum", scale=0.5)]),
        Case("sl1_hand_backward_where_mean_b05", hand_backward_where, ptd, "smooth_l1_grad",
             "paddle.where(|x| < 0.5, x / 0.5, paddle.sign(x)) * dout / x.numel(): a backward written by hand",
             "dout is the full-shape upstream gradient; the mean's 1/numel from numel().",
             [sl1(0.5, "mean", "dout")]),
        Case("sl1_hand_backward_clip_none_d2", hand_backward_clip, ptd, "smooth_l1_grad",
             "paddle.clip(p - t, -2, 2) * dout: the Huber backward by hand", "Huber delta 2: scale 2.",
             [sl1(2.0, "none", "dout", scale=2.0)]),
        Case("sl1_l1_sum", grad_sum(l1_loss), pt, "smooth_l1_grad",
             "paddle.grad(paddle.abs(p - t).sum(), p)",
             "The L1 loss: Paddle's abs_grad decomposes to sign(x) * dout, which is SmoothL1's gradient with "
             "sigma 0 exactly (sign(0) = 0).", [sl1(0.0, "sum")]),
        Case("nm_sl1_changed_constant_sum", grad_sum(smooth_l1(0.5, divisor=0.4)), pt, "near_miss",
             "paddle.grad(paddle.where(|x| < 0.5, 0.5*x**2/0.4, |x| - 0.25).sum(), p)",
             "Near miss: the quadratic divides by 0.4, the branch switches at 0.5.",
             near_misses=[near_miss("select_grad", dict(bind), sl1(0.5, "sum"), reduction="sum", threshold=0.5,
                                    inner_slope=2.5, outer=1.0)]),
        Case("nm_sl1_two_masks_tie_sum", grad_sum(two_mask_loss), pt, "near_miss",
             "paddle.grad(((|x| < 0.5)*x**2 + (|x| > 0.5)*(|x| - 0.25)).sum(), p)",
             "Near miss: gradient 0 at |x| == 0.5, where neither mask holds.",
             near_misses=[near_miss("two_mask_grad", dict(bind), sl1(0.5, "sum"), reduction="sum", sigma=0.5)]),
    ]


def prox_cases() -> list[Case]:
    vd = {"var": PROX_SHAPE, "delta": PROX_SHAPE}
    scalars = {"lr": [], "l1": [], "l2": []}
    const = prox("folded", stored(LR), stored(LR * L1), stored(1 + LR * L2))
    tensor = prox("raw", "lr", "l1", "l2")
    src = f"p = var - {LR}*delta; {{}} / (1 + {LR}*{L2}), t = {LR}*{L1}"
    return [
        Case("prox_const_softshrink", prox_const("softshrink"), vd, "proximal_gd",
             src.format("F.softshrink(p, threshold=t)"), "Paddle's own soft threshold.", [const]),
        Case("prox_const_relu", prox_const("relu"), vd, "proximal_gd", src.format("paddle.sign(p) * F.relu(|p| - t)"),
             "", [const]),
        Case("prox_const_clip", prox_const("clip"), vd, "proximal_gd",
             src.format("paddle.sign(p) * paddle.clip(|p| - t, min=0)"), "", [const]),
        Case("prox_tensor_maximum", prox_tensor("maximum"), {**vd, **scalars}, "proximal_gd",
             "p = var - lr*delta; paddle.sign(p) * paddle.maximum(|p| - lr*l1, 0) / (1 + lr*l2)",
             "lr, l1, l2 are 0-D runtime inputs.", [tensor]),
        Case("prox_tensor_maximum_dynamic", prox_tensor("maximum"), {"var": [None, 16], "delta": [None, 16], **scalars},
             "proximal_gd", "p = var - lr*delta; paddle.sign(p) * paddle.maximum(|p| - lr*l1, 0) / (1 + lr*l2), "
             "var, delta of shape [-1, 16]",
             f"Unknown first dimension (run with {RUN_BATCH}); unlike tf2onnx, paddle2onnx's shape inference "
             "gives var and delta one dim name.", [tensor]),
        Case("prox_tensor_relu", prox_tensor("relu"), {**vd, **scalars}, "proximal_gd",
             "p = var - lr*delta; paddle.sign(p) * F.relu(|p| - lr*l1) / (1 + lr*l2)", "", [tensor]),
        Case("nm_sgd_tensor", sgd, {**vd, "lr": []}, "near_miss", "var - lr*delta", "Near miss: plain SGD.",
             near_misses=[near_miss("sgd", {"var": "var", "alpha": "lr", "delta": "delta"}, prox("raw", "lr", 0.0, 0.0))
                          | {"same_values_but": "no shrink: plain SGD is not a proximal update (DESIGN section 2)"}]),
        Case("nm_prox_subgradient", subgradient_step, {**vd, **scalars}, "near_miss",
             "(var - lr*(delta + l1*paddle.sign(var))) / (1 + lr*l2)",
             "Near miss: the L1 penalty's subgradient step.",
             near_misses=[near_miss("l1_subgradient_step",
                                    {"var": "var", "alpha": "lr", "l1": "l1", "l2": "l2", "delta": "delta"}, tensor)]),
        Case("nm_prox_softshrink_var_sign", softshrink_unscaled_sign, vd, "near_miss",
             src.format("paddle.sign(var) * paddle.abs(F.softshrink(p, threshold=t))"),
             "Near miss: the shrunk magnitude with var's sign instead of p's.",
             near_misses=[near_miss("shrink_with_var_sign",
                                    {"var": "var", "alpha": stored(LR), "l1": stored(LR * L1),
                                     "l2": stored(1 + LR * L2), "delta": "delta"}, const)]),
    ]


# ----------------------------------------------------------------------------------------------

class Program(paddle.nn.Layer):
    """Wraps a plain function for paddle.jit.to_static, which reads forward's named parameters (it
    refuses *args), hence one subclass per number of inputs."""

    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn


class Program2(Program):
    def forward(self, a: paddle.Tensor, b: paddle.Tensor) -> object:
        return self.fn(a, b)


class Program3(Program):
    def forward(self, a: paddle.Tensor, b: paddle.Tensor, c: paddle.Tensor) -> object:
        return self.fn(a, b, c)


class Program5(Program):
    def forward(self, a: paddle.Tensor, b: paddle.Tensor, c: paddle.Tensor, d: paddle.Tensor,
                e: paddle.Tensor) -> object:
        return self.fn(a, b, c, d, e)


class Program7(Program):
    def forward(self, a: paddle.Tensor, b: paddle.Tensor, c: paddle.Tensor, d: paddle.Tensor, e: paddle.Tensor,
                f: paddle.Tensor, g: paddle.Tensor) -> object:
        return self.fn(a, b, c, d, e, f, g)


PROGRAMS = {2: Program2, 3: Program3, 5: Program5, 7: Program7}


_CONVERT = """
import sys, paddle2onnx
paddle2onnx.export(sys.argv[1], sys.argv[2], sys.argv[3], opset_version=int(sys.argv[4]))
"""


def save_program(fn: Callable, inputs: dict[str, list[int | None]], folder: str, prim: bool) -> str:
    paddle.framework.core._set_prim_all_enabled(prim)
    spec = [paddle.static.InputSpec([-1 if d is None else d for d in shape], "float32", name)
            for name, shape in inputs.items()]
    static = paddle.jit.to_static(PROGRAMS[len(spec)](fn), input_spec=spec, full_graph=True)
    prefix = os.path.join(folder, "program")
    paddle.jit.save(static, prefix)
    return prefix


def convert(prefix: str, out: str) -> str | None:
    """paddle2onnx in a child process (it aborts the process on an operator it cannot convert);
    returns its error line, or None when the ONNX file was written."""
    done = subprocess.run([sys.executable, "-c", _CONVERT, f"{prefix}.json", f"{prefix}.pdiparams", out, str(OPSET)],
                          capture_output=True, text=True, env={**os.environ, "GLOG_minloglevel": "3"})
    if done.returncode == 0 and os.path.exists(out):
        return None
    lines = [ln.strip() for ln in (done.stdout + done.stderr).splitlines() if "[ERROR]" in ln]
    return lines[0].split("]", 2)[-1].strip().rstrip(".") if lines else f"exit status {done.returncode}"


def canonical_dim_names(model: onnx.ModelProto) -> None:
    """Number the unknown dims in order of appearance: the shape inference paddle2onnx runs numbers
    them from a per-process counter (DynamicDimension.0 in one run, .1 in the next)."""
    names: dict[str, str] = {}
    for value in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = names.setdefault(dim.dim_param, f"DynamicDimension.{len(names)}")


def export(case: Case) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as folder:
        prefix = save_program(case.fn, case.inputs, folder, case.prim)
        out = os.path.join(folder, "model.onnx")
        error = convert(prefix, out)
        if error:
            raise RuntimeError(f"{case.name}: paddle2onnx: {error}")
        model = onnx.load(out)
    canonical_dim_names(model)
    return model


def measured_limit(fn: Callable, inputs: dict[str, list[int | None]], prim: bool) -> str:
    with tempfile.TemporaryDirectory() as folder:
        error = convert(save_program(fn, inputs, folder, prim), os.path.join(folder, "model.onnx"))
    return f"fails: {error}" if error else "succeeds"


def exporter_limits() -> dict[str, list[str]]:
    """Export paths users would take first that fail here, keyed by the fixture that works around them."""
    pt = {"p": SL1_SHAPE, "t": SL1_SHAPE}
    probes = [
        ("sl1_huber_sum_d05", "paddle.grad of F.smooth_l1_loss(p, t, reduction='sum', delta=0.5) (its backward "
         "huber_loss_grad has no decomposition), with prim", lambda: measured_limit(functional_grad, pt, True)),
        ("sl1_huber_sum_d05", "the same hand-written Huber without Paddle's prim decomposition (abs_grad, "
         "where_grad, sum_grad left as ops)", lambda: measured_limit(grad_sum(huber(0.5)), pt, False)),
        ("sl1_huber_none_vjp_d2", "the same gradient with p, t, dout of shape [-1, 5] (the decomposition "
         "writes shape64, full_with_tensor, reduce_as), with prim",
         lambda: measured_limit(grad_vjp(huber(2.0)), {n: [None, 5] for n in ("p", "t", "dout")}, True)),
        ("prox_tensor_maximum", "a training step x * W + b (W, b of shape [5], x [4, 5]) with the Huber loss's "
         "paddle.grad and this update of W and b (the gradient through the broadcast), with prim",
         lambda: measured_limit(scale_step, {"W": [5], "b": [5], "x": [4, 5], "t": [4, 5], "lr": [], "l1": [],
                                             "l2": []}, True)),
        ("sl1_huber_mean_by_numel_d1", "paddle.grad of the Huber's .mean(), with prim",
         lambda: measured_limit(grad_mean(huber(1.0)), pt, True)),
    ]
    limits: dict[str, list[str]] = {}
    for target, label, measure in probes:
        limits.setdefault(target, []).append(f"Exporter limit measured: {label}: paddle2onnx {measure()}.")
    return limits


def entry_for(case: Case, model: onnx.ModelProto, limits: dict[str, list[str]]) -> dict:
    opset = {o.domain: o.version for o in model.opset_import}[""]
    inputs = {}
    for name, shape in case.inputs.items():
        spec: dict = {"shape": [RUN_BATCH if d is None else d for d in shape], "dtype": "float32"}
        if name in SCALAR_RANGES:
            spec["range"] = list(SCALAR_RANGES[name])
        inputs[name] = spec
    notes = " ".join([case.notes, *limits.pop(case.name, [])]).strip()
    entry = {"exporter": "paddle2onnx", "exporter_version": EXPORTER_VERSION, "opset": opset,
             "family": case.family, "source": case.source, "expected": case.expected, "attrs": case.attrs,
             "dtype": "float32", "dynamic": case.dynamic, "inputs": inputs, "notes": notes}
    if case.near_misses:
        entry["near_misses"] = case.near_misses
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="generate only the cases whose name contains this")
    opts = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    checker = load_new_exporter_checker()
    limits = exporter_limits() if not opts.only else {}
    old = {e["file"]: e for e in json.loads(MANIFEST.read_text(encoding="utf-8"))} if MANIFEST.exists() else {}
    entries, rows = [], []
    for case in sl1_cases() + prox_cases():
        if opts.only not in case.name:
            if case.file in old:
                entries.append(old[case.file])
            continue
        model = export(case)
        entry = record_new_exporter_fixture(case.file, model, entry_for(case, model, limits), checker)
        keep_fusion_status(entry, old.get(case.file))
        entries.append(entry)
        rows.append((case.name, entry["size_bytes"], ops_histogram(model)))
    if limits:
        raise RuntimeError(f"exporter limits recorded for fixtures that were not generated: {sorted(limits)}")
    write_new_exporter_manifest(MANIFEST, FIXTURES, entries, rows, prune=not opts.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
