"""Regenerate the exporter-made ONNX models: the samples in models/ and the fixtures in
tests/fixtures/exporters/ (with their manifest.json).

Every graph here comes out of torch.onnx.export, either the dynamo exporter (torch.export ->
onnxscript torchlib, with or without its optimize step) or the TorchScript exporter
(dynamo=False), so the fused-pattern matcher is tested on what exporters really emit rather than on
hand-built graphs. Each fixture is checked right after export: it must pass onnx.checker, run under
onnxruntime with graph optimizations disabled, and match the float64 references of
contracts/fused_ops.py (the same check_entry() that tests/lowering/test_fixtures_load.py runs).

Needs torch (2.13.0 was used); CI has no torch, so the .onnx files and the manifest are committed.
Usage: python models/make_models.py [--only SUBSTRING] [--show]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from fixture_common import load_checker, ops_histogram, record, render_form

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/exporters")
SAMPLES = Path("models")
MANIFEST = REPO / FIXTURES / "manifest.json"

SL1 = "SmoothL1LossGradV2"
PROX = "ApplyProximalGradientDescent"
REDUCTION_INT = {"none": 0, "mean": 1, "sum": 2}

# Hyperparameters of the proximal updates written with Python constants.
LR, L1, L2 = 0.1, 0.01, 0.05
SCALAR_RANGES = {"lr": (0.05, 0.2), "l1": (0.005, 0.05), "l2": (0.01, 0.1),
                 "threshold": (0.001, 0.01), "divisor": (1.0, 1.1), "inv_divisor": (0.9, 1.0),
                 "go": (0.5, 2.0)}
TORCH_TO_NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
NAME_TO_NP = {"float32": np.float32, "float16": np.float16}


def stored(value: float, dtype: str = "float32") -> float:
    """The value a constant of this dtype really holds, so references use what the graph uses."""
    if dtype == "bfloat16":
        return float(torch.tensor(value, dtype=torch.bfloat16).item())
    return float(NAME_TO_NP[dtype](value))


class Fn(torch.nn.Module):
    """Wraps a plain function so both exporters can trace it."""

    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> object:
        return self.fn(*args)


@dataclass
class Case:
    file: str                      # path relative to the repository root
    fn: Callable[..., object] | torch.nn.Module
    args: dict[str, torch.Tensor]  # forward inputs, by graph input name, in order
    exporter: str                  # "dynamo" | "dynamo-optimized" | "torchscript"
    family: str
    attrs: list[dict]
    notes: str
    opset: int | None = None
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)  # input -> {axis: dim name}
    run_shapes: dict[str, list[int]] = field(default_factory=dict)    # concrete shapes if dynamic
    outputs: list[str] | None = None
    not_fused: list[dict] = field(default_factory=list)
    ts_kwargs: dict = field(default_factory=dict)
    dtype: str = "float32"

    @property
    def expected(self) -> dict[str, int]:
        return {op: sum(1 for a in self.attrs if a["op"] == op) for op in (SL1, PROX)}


def sl1(output: str, sigma: float, reduction: str, predict: str, label: str, dout: str | float,
        scale: float = 1.0, **extra: object) -> dict:
    return {"op": SL1, "sigma": sigma, "reduction": reduction, "scale": scale,
            "inputs": {"predict": predict, "label": label, "dout": dout}, "output": output, **extra}


def prox(output: str, scalar_form: str, var: str, delta: str, alpha: str | float,
         l1: str | float, l2: str | float, **extra: object) -> dict:
    return {"op": PROX, "scalar_form": scalar_form,
            "inputs": {"var": var, "alpha": alpha, "l1": l1, "l2": l2, "delta": delta},
            "output": output, **extra}


# ----------------------------------------------------------------------------------------------
# The functions users write. SmoothL1 backward first.

def aten_sl1(reduction: str, beta: float) -> Callable[..., torch.Tensor]:
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.smooth_l1_loss_backward(go, p, t, REDUCTION_INT[reduction], beta)
    return fn


def aten_huber(reduction: str, delta: float) -> Callable[..., torch.Tensor]:
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.huber_loss_backward(go, p, t, REDUCTION_INT[reduction], delta)
    return fn


def hand_sl1(reduction: str, beta: float, compare: str = "lt", upcast: bool = False,
             extra_output: str | None = None, branch: str = "div", sign: str = "sign") -> Callable[..., object]:
    """torch.where(|x| < beta, g * x / beta, g * sign(x)), written the way a user would."""
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> object:
        if upcast:
            go, p32, t32 = go.float(), p.float(), t.float()
        else:
            p32, t32 = p, t
        x = p32 - t32
        g = go / p.numel() if reduction == "mean" else go
        ax = x.abs()
        inside = ax < beta if compare == "lt" else ax <= beta
        linear = g * x / beta if branch == "div" else g * x * beta
        out = torch.where(inside, linear, g * (torch.sgn(x) if sign == "sgn" else torch.sign(x)))
        if upcast:
            out = out.to(p.dtype)
        if extra_output == "x":
            return out, x
        if extra_output == "abs":
            return out, ax
        return out
    return fn


def hand_sl1_clip(reduction: str, beta: float) -> Callable[..., torch.Tensor]:
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        g = go / p.numel() if reduction == "mean" else go
        return torch.clamp((p - t) / beta, -1.0, 1.0) * g
    return fn


def hand_huber(reduction: str, delta: float) -> Callable[..., torch.Tensor]:
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = p - t
        g = go / p.numel() if reduction == "mean" else go
        return torch.where(x < -delta, -delta * g, torch.where(x > delta, delta * g, x * g))
    return fn


class OverridableBeta(torch.nn.Module):
    """beta lives in a buffer; exported with keep_initializers_as_inputs it becomes overridable."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("beta", torch.tensor(0.5))

    def forward(self, go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = p - t
        g = go / p.numel()
        return torch.where(x.abs() < self.beta, g * x / self.beta, g * torch.sign(x))


def autograd_sl1(reduction: str, beta: float, with_go: bool) -> Callable[..., torch.Tensor]:
    """F.smooth_l1_loss forward + torch.autograd.grad inside forward (dynamo records the joint)."""
    def fn(p: torch.Tensor, t: torch.Tensor, *go: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            q = p.detach().requires_grad_(True)
            loss = F.smooth_l1_loss(q, t, reduction=reduction, beta=beta)
            return torch.autograd.grad(loss, q, grad_outputs=go[0] if with_go else None)[0]
    return fn


def functorch_sl1(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return torch.func.grad(lambda q: F.smooth_l1_loss(q, t, beta=0.5))(p)


# Proximal updates.

def prox_fn(clamp: str = "clamp", step: str = "sub", scale: str = "div", scalars: str = "const",
            upcast: bool = False, sign: str = "sign", shrink: str = "sign") -> Callable[..., torch.Tensor]:
    """out = sign(p) * max(|p| - lr*l1, 0) / (1 + lr*l2), p = var - lr*delta, in several spellings.

    scalars: "const" (Python floats, folded by the exporter), "tensor" (lr, l1, l2 inputs),
    "folded" (threshold, divisor inputs), "folded_recip" (threshold, inv_divisor inputs).
    shrink: "sign" (sign(p) * clamp), or without sign(p): "residual" (ISTA's p - clamp(p, -t, t)),
    "residual_minmax" (the same with minimum/maximum), "relu_difference" (LISTA's relu(p - t) -
    relu(-p - t)), "masked" ((p - t*sign(p)) * (|p| > t).float()), "group_lasso" (p * relu(1 - t/|p|),
    the group-lasso proximal step at group size 1).
    """
    def fn(var: torch.Tensor, delta: torch.Tensor, *s: torch.Tensor) -> torch.Tensor:
        v, d = (var.float(), delta.float()) if upcast else (var, delta)
        if scalars == "const":
            lr, thr, div = LR, LR * L1, 1 + LR * L2
        elif scalars == "tensor":
            lr, l1, l2 = s
            thr, div = lr * l1, 1 + lr * l2
        else:
            lr, thr, div = s
        if step == "sub":
            p = v - lr * d
        elif step == "add_alpha":
            p = v.add(d, alpha=-lr)
        else:
            p = v + d * (-lr)
        if shrink != "sign":
            out = _soft_threshold(p, thr, shrink)
        else:
            shrunk = p.abs() - thr
            if clamp == "clamp":
                shrunk = torch.clamp(shrunk, min=0)
            elif clamp == "clamp_min":
                shrunk = torch.clamp_min(shrunk, 0.0)
            elif clamp == "maximum":
                shrunk = torch.maximum(shrunk, torch.zeros_like(p))
            elif clamp == "relu":
                shrunk = torch.relu(shrunk)
            elif clamp == "threshold":
                shrunk = F.threshold(shrunk, 0.0, 0.0)
            elif clamp == "where_gt":
                shrunk = torch.where(shrunk > 0, shrunk, 0.0)
            elif clamp == "abs":
                shrunk = shrunk.abs()
            out = (torch.sgn(p) if sign == "sgn" else torch.sign(p)) * shrunk
        if scalars == "folded_recip":
            out = out * div
        elif scale == "div":
            out = out / div
        else:
            out = out * (1.0 / div)
        return out.to(var.dtype) if upcast else out
    return fn


def _soft_threshold(p: torch.Tensor, t: torch.Tensor | float, shrink: str) -> torch.Tensor:
    """sign(p) * max(|p| - t, 0) written without sign(p) * clamp (prox_fn's other shrinks)."""
    if shrink == "masked":
        return (p - t * p.sign()) * (p.abs() > t).float()
    if shrink == "relu_difference":
        return torch.relu(p - t) - torch.relu(-p - t)
    if shrink == "group_lasso":
        return p * torch.relu(1 - t / p.abs())
    return p - (torch.minimum(torch.maximum(p, -t), t) if shrink == "residual_minmax" else torch.clamp(p, -t, t))


def softshrink_fn(var: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    return F.softshrink(var - LR * delta, LR * L1) / (1 + LR * L2)


def sgd_fn(var: torch.Tensor, delta: torch.Tensor, *lr: torch.Tensor) -> torch.Tensor:
    return var - (lr[0] if lr else LR) * delta


def l2_only_fn(var: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    return (var - LR * delta) / (1 + LR * L2)


def _prox_update(p: torch.Tensor, g: torch.Tensor, lr: torch.Tensor, l1: torch.Tensor,
                 l2: torch.Tensor) -> torch.Tensor:
    q = p - lr * g
    return torch.sign(q) * torch.clamp(q.abs() - lr * l1, min=0) / (1 + lr * l2)


class BoxHeadStep(torch.nn.Module):
    """One training step of a linear box-regression head: SmoothL1 loss, autograd, prox update."""

    def __init__(self, beta: float = 0.5, return_loss: bool = False) -> None:
        super().__init__()
        self.beta, self.return_loss = beta, return_loss

    def forward(self, x: torch.Tensor, target: torch.Tensor, W: torch.Tensor, b: torch.Tensor,
                lr: torch.Tensor, l1: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.enable_grad():
            Wq, bq = W.detach().requires_grad_(True), b.detach().requires_grad_(True)
            loss = F.smooth_l1_loss(x @ Wq + bq, target, beta=self.beta)
            gW, gb = torch.autograd.grad(loss, [Wq, bq])
        out = (_prox_update(W, gW, lr, l1, l2), _prox_update(b, gb, lr, l1, l2))
        return (*out, loss.detach()) if self.return_loss else out


class TwoHeadStep(torch.nn.Module):
    """Two regression heads on shared features, each with its own SmoothL1 (aten backward op)."""

    def forward(self, x: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, W1: torch.Tensor,
                b1: torch.Tensor, W2: torch.Tensor, b2: torch.Tensor, lr: torch.Tensor,
                l1: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        one = torch.ones((), dtype=x.dtype)
        g1 = torch.ops.aten.smooth_l1_loss_backward(one, x @ W1 + b1, t1, 1, 0.5)
        g2 = torch.ops.aten.smooth_l1_loss_backward(one, x @ W2 + b2, t2, 2, 2.0)
        return (_prox_update(W1, x.t() @ g1, lr, l1, l2), _prox_update(b1, g1.sum(0), lr, l1, l2),
                _prox_update(W2, x.t() @ g2, lr, l1, l2), _prox_update(b2, g2.sum(0), lr, l1, l2))


class TwoHeadStepHand(torch.nn.Module):
    """TwoHeadStep with the SmoothL1 gradient written by hand (the TorchScript exporter has no
    symbolic for aten::smooth_l1_loss_backward)."""

    def forward(self, x: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, W1: torch.Tensor,
                b1: torch.Tensor, W2: torch.Tensor, b2: torch.Tensor, lr: torch.Tensor,
                l1: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p1, p2 = x @ W1 + b1, x @ W2 + b2
        one = torch.ones((), dtype=x.dtype)
        g1 = hand_sl1("mean", 0.5)(one, p1, t1)
        g2 = hand_sl1("sum", 2.0)(one, p2, t2)
        return (_prox_update(W1, x.t() @ g1, lr, l1, l2), _prox_update(b1, g1.sum(0), lr, l1, l2),
                _prox_update(W2, x.t() @ g2, lr, l1, l2), _prox_update(b2, g2.sum(0), lr, l1, l2))


class FrozenBackboneStep(torch.nn.Module):
    """A larger step: frozen backbone (initializers) -> trainable head, SmoothL1, prox update."""

    def __init__(self, d_in: int, d_hidden: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.backbone = torch.nn.Linear(d_in, d_hidden)
        with torch.no_grad():
            self.backbone.weight.copy_(torch.randn(d_hidden, d_in, generator=gen) / d_in**0.5)
            self.backbone.bias.copy_(torch.randn(d_hidden, generator=gen) * 0.1)
        self.backbone.requires_grad_(False)

    def forward(self, x: torch.Tensor, target: torch.Tensor, W: torch.Tensor, b: torch.Tensor,
                lr: torch.Tensor, l1: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feat = torch.relu(self.backbone(x))
        with torch.enable_grad():
            Wq, bq = W.detach().requires_grad_(True), b.detach().requires_grad_(True)
            loss = F.smooth_l1_loss(feat @ Wq + bq, target, beta=1.0)
            gW, gb = torch.autograd.grad(loss, [Wq, bq])
        return _prox_update(W, gW, lr, l1, l2), _prox_update(b, gb, lr, l1, l2)


# ----------------------------------------------------------------------------------------------
# Inputs.

def randn(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0,
          gen: torch.Generator) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def sl1_args(reduction: str, dtype: torch.dtype, gen: torch.Generator,
             shape: tuple[int, ...] = (4, 5)) -> dict[str, torch.Tensor]:
    go = randn(*shape, dtype=dtype, gen=gen) if reduction == "none" else torch.tensor(1.3, dtype=dtype)
    return {"go": go, "p": randn(*shape, dtype=dtype, gen=gen), "t": randn(*shape, dtype=dtype, gen=gen)}


def prox_args(scalars: str, dtype: torch.dtype, gen: torch.Generator,
              shape: tuple[int, ...] = (8, 16), scalar_shape: tuple[int, ...] = (),
              scalar_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    args = {"var": randn(*shape, dtype=dtype, gen=gen), "delta": randn(*shape, dtype=dtype, gen=gen)}
    names = {"const": (), "tensor": ("lr", "l1", "l2"), "folded": ("lr", "threshold", "divisor"),
             "folded_recip": ("lr", "threshold", "inv_divisor")}[scalars]
    for name in names:
        lo, hi = SCALAR_RANGES[name]
        args[name] = torch.full(scalar_shape, (lo + hi) / 2, dtype=scalar_dtype or dtype)
    return args


def step_args(gen: torch.Generator, n: int = 16, d: int = 8, k: int = 4) -> dict[str, torch.Tensor]:
    return {"x": randn(n, d, gen=gen), "target": randn(n, k, gen=gen), "W": randn(d, k, scale=0.5, gen=gen),
            "b": randn(k, scale=0.1, gen=gen), "lr": torch.tensor(0.1), "l1": torch.tensor(0.01),
            "l2": torch.tensor(0.05)}


# ----------------------------------------------------------------------------------------------
# The catalogue.

def fx(name: str) -> str:
    return str(FIXTURES / name)


def sl1_cases(gen: torch.Generator) -> list[Case]:
    c: list[Case] = []
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

    def aten(name: str, reduction: str, beta: float, dtype: torch.dtype, optimize: bool, notes: str,
             out: str, dynamic: bool = False, opset: int | None = None) -> None:
        args = sl1_args(reduction, dtype, gen)
        dyn = {"p": {0: "n"}, "t": {0: "n"}, **({"go": {0: "n"}} if reduction == "none" else {})}
        c.append(Case(fx(name), aten_sl1(reduction, beta), args,
                      "dynamo-optimized" if optimize else "dynamo", "smooth_l1_grad",
                      [sl1(out, beta, reduction, "p", "t", "go")], notes, opset=opset,
                      dynamic=dyn if dynamic else {}, dtype=TORCH_TO_NAME[dtype],
                      run_shapes={k: [7, 5] for k in dyn} if dynamic else {}))

    aten("sl1_aten_mean_b1_f32_dyn.onnx", "mean", 1.0, f32, False,
         "aten.smooth_l1_loss_backward via torch._decomp: Where(Less(Abs(d),1.0), Div(Mul(Mul(go,0.05),d),1.0), "
         "Mul(Mul(go,0.05),Sign(d))), d=Sub(p,t). Not optimized: every constant is a Constant node, the "
         "/1.0 is still there; norm 1/numel folded to the constant 0.05 (=1/20). Equivalent attrs: "
         "reduction 'sum' with scale 0.05.", "where")
    aten("sl1_aten_mean_b1_f32_dynopt.onnx", "mean", 1.0, f32, True,
         "optimize=True removed Div(.,1.0): Where(Less(Abs(d),1), Mul(Mul(go,0.05),d), Mul(Mul(go,0.05),Sign(d))); "
         "0.05 and 1.0 are initializers (val_0, val_1); g=Mul(go,0.05) shared by both branches.", "where")
    aten("sl1_aten_mean_b05_f32_dyn.onnx", "mean", 0.5, f32, False,
         "Not optimized, beta 0.5: Where(Less(Abs(d),0.5), Div(Mul(Mul(go,0.05),d),0.5), Mul(Mul(go,0.05),Sign(d))); "
         "one Constant node 0.5 feeds both Less and Div.", "where")
    aten("sl1_aten_mean_b05_f32_dynopt.onnx", "mean", 0.5, f32, True,
         "optimize=True, beta 0.5: same shape as the decomposition with initializers val_0=0.05 (norm), "
         "val_1=0.5 (beta, shared by Less and Div).", "where")
    aten("sl1_aten_sum_b2_f32_dyn.onnx", "sum", 2.0, f32, False,
         "Not optimized, sum: Mul(go, Constant 1.0) is still present (norm=1), beta 2.0 Constant.", "where")
    aten("sl1_aten_sum_b2_f32_dynopt.onnx", "sum", 2.0, f32, True,
         "optimize=True, sum: Mul(go,1) removed, go (0-D) feeds Mul(go,d) and Mul(go,Sign(d)) directly: "
         "Where(Less(Abs(d),2), Div(Mul(go,d),2), Mul(go,Sign(d))).", "where")
    aten("sl1_aten_none_b05_f32_dynopt.onnx", "none", 0.5, f32, True,
         "optimize=True, none: go has the full [4,5] shape, no norm Mul.", "where")
    aten("sl1_aten_none_b1_f32_dynopt.onnx", "none", 1.0, f32, True,
         "optimize=True, none, beta 1: both Mul(go,1) and Div(.,1) removed: "
         "Where(Less(Abs(d),1), Mul(go,d), Mul(go,Sign(d))).", "where")
    aten("sl1_aten_mean_b0_f32_dynopt.onnx", "mean", 0.0, f32, True,
         "beta 0.0 (only the aten op can express it; F.smooth_l1_loss routes beta=0 to l1_loss): the graph "
         "keeps Less(Abs(d),0.0) (never true) and Div(Mul(g,d),0.0) (inf/nan in the unselected branch), so "
         "the output is Mul(g,Sign(d)); beta initializer val_1=0.0.", "where")
    aten("sl1_aten_mean_b05_f16_dynopt.onnx", "mean", 0.5, f16, True,
         "float16: pw_cast_for_opmath wraps the decomposition: Cast(to=FLOAT) on go, p, t, float32 body with "
         "float32 initializers, Cast(to=FLOAT16) on the Where output (output '_to_copy_3').", "_to_copy_3")
    aten("sl1_aten_none_b2_f16_dyn.onnx", "none", 2.0, f16, False,
         "float16, not optimized, none: Casts to float32 on the three inputs, Mul(go_f32, Constant 1.0) kept, "
         "Div by Constant 2.0, final Cast(to=FLOAT16).", "_to_copy_3")
    aten("sl1_aten_sum_b2_bf16_dynopt.onnx", "sum", 2.0, bf16, True,
         "bfloat16: Cast(to=FLOAT) on go, p, t; float32 body (Mul(go,1) removed); Cast(to=BFLOAT16) at the end.",
         "_to_copy_3")
    aten("sl1_aten_mean_b1_bf16_dynopt.onnx", "mean", 1.0, bf16, True,
         "bfloat16, beta 1, mean: Cast wrappers around Where(Less(Abs(d),1), Mul(Mul(go,0.05),d), "
         "Mul(Mul(go,0.05),Sign(d))).", "_to_copy_3")
    aten("sl1_aten_sum_b05_f32_dynamic_dynopt.onnx", "sum", 0.5, f32, True,
         "dynamic_shapes dim 0 of p,t is 'n': graph identical to the static sum form (no shape ops).",
         "where", dynamic=True)
    aten("sl1_aten_none_b2_f32_dynamic_dynopt.onnx", "none", 2.0, f32, True,
         "dynamic_shapes dim 0 of go,p,t is 'n', reduction none: no shape ops.", "where", dynamic=True)
    aten("sl1_aten_mean_b05_f32_opset18_dynopt.onnx", "mean", 0.5, f32, True,
         "opset_version=18: same nodes as at opset 20.", "where", opset=18)

    def huber(name: str, reduction: str, delta: float, optimize: bool, notes: str,
              dtype: torch.dtype = f32, out: str = "where_1") -> None:
        c.append(Case(fx(name), aten_huber(reduction, delta), sl1_args(reduction, dtype, gen),
                      "dynamo-optimized" if optimize else "dynamo", "smooth_l1_grad",
                      [sl1(out, delta, reduction, "p", "t", "go", scale=delta)], notes,
                      dtype=TORCH_TO_NAME[dtype]))

    huber("sl1_huber_mean_d05_f32_dyn.onnx", "mean", 0.5, False,
          "aten.huber_loss_backward decomposition, not optimized: d=Sub(p,t); Where(Less(d,-0.5), "
          "Mul(Mul(go,-0.05),0.5), Where(Greater(d,0.5), Mul(Mul(go,0.05),0.5), Mul(Mul(d,0.05),go))). No Abs, "
          "no Sign; -delta and delta are separate Constants; = delta * SmoothL1 grad with sigma=delta.")
    huber("sl1_huber_mean_d05_f32_dynopt.onnx", "mean", 0.5, True,
          "Huber delta 0.5, optimized: nested Where(Less(d,-0.5), Mul(Mul(go,-0.05),0.5), Where(Greater(d,0.5), "
          "Mul(Mul(go,0.05),0.5), Mul(Mul(d,0.05),go))); constants as initializers (0.05 shared).")
    huber("sl1_huber_mean_d1_f32_dynopt.onnx", "mean", 1.0, True,
          "Huber delta 1.0, optimized: the *delta Muls are gone: Where(Less(d,-1), Mul(go,-0.05), "
          "Where(Greater(d,1), Mul(go,0.05), Mul(Mul(d,0.05),go))).")
    huber("sl1_huber_none_d05_f16_dynopt.onnx", "none", 0.5, True,
          "Huber float16, none: Cast(to=FLOAT) on inputs; Where(Less(d,-0.5), Mul(Mul(go,-1),0.5), "
          "Where(Greater(d,0.5), Mul(go,0.5), Mul(d,go))) (norm 1 folded into the -1); Cast(to=FLOAT16) on the "
          "result.", dtype=f16, out="_to_copy_3")

    p, t = randn(4, 5, gen=gen), randn(4, 5, gen=gen)
    c.append(Case(fx("sl1_autograd_mean_b05_f32_dynopt.onnx"), autograd_sl1("mean", 0.5, False),
                  {"p": p, "t": t}, "dynamo-optimized", "smooth_l1_grad",
                  [sl1("where_1", 0.5, "mean", "p", "t", 1.0)],
                  "F.smooth_l1_loss + torch.autograd.grad inside forward (torch.export records the backward; the "
                  "unused forward loss is dropped). grad_output=ones is folded with norm into one initializer "
                  "mul_1=0.05, so g is a constant: Where(Less(Abs(d),0.5), Div(Mul(0.05,d),0.5), Mul(0.05,Sign(d))) "
                  "with the constant as the FIRST Mul operand. No dout input: the constant is norm*1 "
                  "(0.05 = 1/numel), so "
                  "reduction 'mean' with dout 1.0 (equivalently reduction 'sum' with dout 0.05)."))
    c.append(Case(fx("sl1_autograd_mean_b05_f32_dyn.onnx"), autograd_sl1("mean", 0.5, False),
                  {"p": p.clone(), "t": t.clone()}, "dynamo", "smooth_l1_grad",
                  [sl1("where_1", 0.5, "mean", "p", "t", "ones_like")],
                  "autograd, not optimized: the dead forward loss (Pow/ReduceMean) stays in the graph but shares "
                  "nothing with the backward (own Sub/Abs); dout is ones_like=Expand(CastLike(1,mean),Shape(mean)) "
                  "(0-D runtime value) times Constant 0.05."))
    c.append(Case(fx("sl1_autograd_sum_b1_f32_dynopt.onnx"), autograd_sl1("sum", 1.0, False),
                  {"p": randn(4, 5, gen=gen), "t": randn(4, 5, gen=gen)}, "dynamo-optimized", "smooth_l1_grad",
                  [sl1("where_1", 1.0, "sum", "p", "t", 1.0)],
                  "autograd, sum, beta 1: dout=1, norm=1 and /1 all vanish: Where(Less(Abs(d),1), d, Sign(d)). "
                  "The smallest form; dout is the implicit constant 1."))
    c.append(Case(fx("sl1_autograd_sum_b05_f32_go_dynopt.onnx"), autograd_sl1("sum", 0.5, True),
                  {"p": randn(4, 5, gen=gen), "t": randn(4, 5, gen=gen), "go": torch.tensor(1.5)},
                  "dynamo-optimized", "smooth_l1_grad", [sl1("where_1", 0.5, "sum", "p", "t", "go")],
                  "autograd with grad_outputs=go (0-D input): Where(Less(Abs(d),0.5), Div(Mul(go,d),0.5), "
                  "Mul(go,Sign(d)))."))

    def hand(name: str, fn: Callable[..., object], reduction: str, beta: float, exporter: str,
             notes: str, out: str, dtype: torch.dtype = f32, scale: float = 1.0, opset: int | None = None,
             dynamic: bool = False, family: str = "smooth_l1_grad", not_fused: list[dict] | None = None,
             outputs: list[str] | None = None, **kw: object) -> None:
        args = sl1_args(reduction, dtype, gen)
        inst = sl1(out, beta, reduction, "p", "t", "go", scale=scale)
        dyn = {"p": {0: "n"}, "t": {0: "n"}}
        c.append(Case(fx(name), fn, args, exporter, family, [] if not_fused is not None else [inst], notes,
                      opset=opset, dtype=TORCH_TO_NAME[dtype], dynamic=dyn if dynamic else {},
                      run_shapes={k: [7, 5] for k in dyn} if dynamic else {},
                      not_fused=[{**inst, **nf} for nf in not_fused or []], outputs=outputs or ["grad"], **kw))

    hand("sl1_hand_where_mean_b05_f32_ts.onnx", hand_sl1("mean", 0.5), "mean", 0.5, "torchscript",
         "TorchScript, written by hand (see the exporter limit below): "
         "Where(Less(Abs(d),0.5), Div(Mul(Div(go,20.0),d),0.5), Mul(Div(go,20.0),Sign(d))); norm is "
         "Div(go, 20.0) (p.numel() traced then constant-folded), every constant a Constant node.", "grad",
         opset=17)
    hand("sl1_hand_where_mean_b05_f32_dynopt.onnx", hand_sl1("mean", 0.5), "mean", 0.5, "dynamo-optimized",
         "Hand-written, dynamo optimized: norm is Div(go, 20.0) (not Mul by 0.05); otherwise the "
         "decomposition form.", "grad")
    hand("sl1_hand_le_sum_b2_f32_ts.onnx", hand_sl1("sum", 2.0, compare="le"), "sum", 2.0, "torchscript",
         "LessOrEqual instead of Less: Where(LessOrEqual(Abs(d),2.0), Div(Mul(go,d),2.0), Mul(go,Sign(d))).",
         "grad", opset=17)
    hand("sl1_hand_le_sum_b2_f32_dynopt.onnx", hand_sl1("sum", 2.0, compare="le"), "sum", 2.0,
         "dynamo-optimized", "LessOrEqual form from the dynamo exporter, constants as initializers.", "grad")
    hand("sl1_hand_clip_none_b05_f32_ts.onnx", hand_sl1_clip("none", 0.5), "none", 0.5, "torchscript",
         "Clip form: Mul(Clip(Div(Sub(p,t),0.5), -1.0, 1.0), go) with Clip min/max as Constant inputs "
         "(opset 17).", "grad", opset=17)
    hand("sl1_hand_clip_mean_b1_f32_dynopt.onnx", hand_sl1_clip("mean", 1.0), "mean", 1.0,
         "dynamo-optimized", "Clip form, beta 1 (the /1 is removed by optimize): Mul(Clip(Sub(p,t),-1,1), "
         "Div(go,20.0)).", "grad")
    hand("sl1_hand_huber_none_d05_f32_ts.onnx", hand_huber("none", 0.5), "none", 0.5, "torchscript",
         "Hand-written Huber gradient: Where(Less(d,-0.5), Mul(go,-0.5), Where(Greater(d,0.5), Mul(go,0.5), "
         "Mul(d,go))) (TorchScript, opset 17). scale = delta.", "grad", scale=0.5, opset=17)
    hand("sl1_hand_where_mean_b05_f16_cast_ts.onnx", hand_sl1("mean", 0.5, upcast=True), "mean", 0.5,
         "torchscript", "float16 with the user's own upcast (.float() ... .to(float16)): Cast(to=FLOAT) on "
         "go,p,t, float32 body, Cast(to=FLOAT16) on the result.", "grad", dtype=f16, opset=17)
    hand("sl1_hand_where_sum_b05_f16_ts.onnx", hand_sl1("sum", 0.5), "sum", 0.5, "torchscript",
         "float16 without user casts: Sub/Abs/Mul/Div/Sign run in float16 (Div by a float16 Constant 0.5), but "
         "the comparison is Less(Cast(Abs(d),to=FLOAT), float32 Constant 0.5) (TorchScript promotes the "
         "compare against a Python float). ORT's float16 Sign(NaN) is 0, so NaN in p gives 0 here.", "grad",
         dtype=f16, opset=17)
    hand("sl1_hand_where_mean_b05_f32_dynamic_dynopt.onnx", hand_sl1("mean", 0.5), "mean", 0.5,
         "dynamo-optimized",
         "mean with dynamic dim 'n' (the aten op cannot, see the exporter limit below), so written by hand: "
         "numel = Cast(Mul(Squeeze(Shape(t,start=0,end=1)), 5 int64), to=FLOAT); "
         "g = Div(go, numel); then the usual Where form.", "grad", dynamic=True)
    hand("sl1_hand_where_mean_b05_f32_dynamic_ts.onnx", hand_sl1("mean", 0.5), "mean", 0.5, "torchscript",
         "TorchScript with dynamic_axes: numel = Cast(ReduceProd(Shape(p), keepdims=0), to=FLOAT); "
         "g = Div(go, numel).", "grad", dynamic=True, opset=17)
    hand("sl1_hand_where_none_b05_bf16_cast_dynopt.onnx", hand_sl1("none", 0.5, upcast=True), "none", 0.5,
         "dynamo-optimized", "bfloat16 with the user's upcast: Cast(to=FLOAT) on go,p,t; Cast(to=BFLOAT16) "
         "at the end.", "grad", dtype=bf16)

    # Near misses of the SmoothL1 family.
    hand("nm_sl1_sub_output_dynopt.onnx", hand_sl1("mean", 0.5, extra_output="x"), "mean", 0.5,
         "dynamo-optimized", "Near miss: x = Sub(p,t) is also the graph output 'x'.", "grad",
         family="near_miss", not_fused=[{"reason": "intermediate Sub(p,t) is a graph output"}],
         outputs=["grad", "x"])
    hand("nm_sl1_abs_output_ts.onnx", hand_sl1("sum", 2.0, extra_output="abs"), "sum", 2.0, "torchscript",
         "Near miss: |x| = Abs(Sub(p,t)) is also the graph output 'abs_x'.", "grad", opset=17,
         family="near_miss", not_fused=[{"reason": "intermediate Abs(x) is a graph output"}],
         outputs=["grad", "abs_x"])
    hand("nm_sl1_mulbeta_dynopt.onnx", hand_sl1("sum", 0.5, branch="mul"), "sum", 0.5, "dynamo-optimized",
         "Near miss: the linear branch is Mul(Mul(go,d),0.5) (x*beta) instead of Div(.,0.5).", "grad",
         family="near_miss", not_fused=[])
    hand("nm_sl1_mulbeta_ts.onnx", hand_sl1("none", 2.0, branch="mul"), "none", 2.0, "torchscript",
         "Near miss: Where(Less(Abs(d),2), Mul(Mul(go,d),2), Mul(go,Sign(d))): x*beta, not x/beta.", "grad",
         opset=17, family="near_miss", not_fused=[])
    hand("nm_sl1_beta_overridable_ts.onnx", OverridableBeta(), "mean", 0.5, "torchscript",
         "Near miss: beta is the buffer 'beta', exported with keep_initializers_as_inputs=True, so it is an "
         "initializer that is also a graph input (overridable): Less(Abs(d),beta), Div(.,beta). sigma is an "
         "attribute, so it cannot be fused.", "grad", opset=17, family="near_miss",
         not_fused=[{"reason": "beta is an initializer that is also a graph input"}],
         ts_kwargs={"keep_initializers_as_inputs": True})
    args = sl1_args("mean", f32, gen)
    c.append(Case(fx("nm_sl1_aten_shared_sub_dynopt.onnx"),
                  lambda go, p, t: (aten_sl1("mean", 0.5)(go, p, t), (p - t).abs().sum()), args,
                  "dynamo-optimized", "smooth_l1_grad", [sl1("grad", 0.5, "mean", "p", "t", "go")],
                  "aten SmoothL1 backward plus a separate user term |p - t|.sum(); the optimizer's CSE merges the "
                  "two Sub(p,t) and the two Abs, so both are also read outside the backward (ReduceSum): they are "
                  "computed again for it (recompute_shared, the default; a near miss without it, hence the name).",
                  outputs=["grad", "l1"]))
    return c


def prox_cases(gen: torch.Generator) -> list[Case]:
    c: list[Case] = []
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

    def const_inst(out: str, dtype: str = "float32", form: str = "folded") -> dict:
        l2 = stored(1.0 / (1 + LR * L2), dtype) if form == "folded_reciprocal" else stored(1 + LR * L2, dtype)
        return prox(out, form, "var", "delta", stored(LR, dtype), stored(LR * L1, dtype), l2)

    def tensor_inst(out: str, form: str = "raw") -> dict:
        names = {"raw": ("l1", "l2"), "folded": ("threshold", "divisor"),
                 "folded_reciprocal": ("threshold", "inv_divisor")}[form]
        return prox(out, form, "var", "delta", "lr", *names)

    def add(name: str, fn: Callable[..., torch.Tensor], args: dict[str, torch.Tensor], exporter: str,
            inst: dict | None, notes: str, opset: int | None = None, dynamic: bool = False,
            family: str = "proximal_gd", not_fused: list[dict] | None = None) -> None:
        dtype = TORCH_TO_NAME[args["var"].dtype]
        dyn = {"var": {0: "n"}, "delta": {0: "n"}}
        c.append(Case(fx(name), fn, args, exporter, family, [inst] if inst else [], notes, opset=opset,
                      dtype=dtype, dynamic=dyn if dynamic else {},
                      run_shapes={k: [5, 16] for k in dyn} if dynamic else {},
                      outputs=["var_out"], not_fused=not_fused or []))

    def const(dtype: torch.dtype = f32) -> dict[str, torch.Tensor]:
        return prox_args("const", dtype, gen)

    def tensor(dtype: torch.dtype = f32, **kw: object) -> dict[str, torch.Tensor]:
        return prox_args("tensor", dtype, gen, **kw)

    add("prox_const_clamp_f32_dyn.onnx", prox_fn(), const(), "dynamo", const_inst("var_out"),
        "Python-float hyperparameters, not optimized: Div(Mul(Sign(p), Max(Sub(Abs(p),0.001), "
        "CastLike(Cast(Constant 0 int64,to=FLOAT),sub_1))), 1.005), p=Sub(var, Mul(delta,0.1)). clamp(min=0) "
        "becomes Max with a Cast/CastLike'd zero; lr*l1 and 1+lr*l2 already folded by Python.")
    add("prox_const_clamp_f32_dynopt.onnx", prox_fn(), const(), "dynamo-optimized", const_inst("var_out"),
        "Optimized: Div(Mul(Sign(p), Max(Sub(Abs(p), t), 0.0)), k) with p=Sub(var, Mul(delta, 0.1)); "
        "initializers 0.1, t=0.001, k=1.005, zero=0.0 (0-D).")
    add("prox_const_clamp_f32_ts.onnx", prox_fn(), const(), "torchscript", const_inst("var_out"),
        "TorchScript opset 17: clamp(min=0) -> Clip(x, Constant 0.0, '') (min as input, max empty); "
        "constants are Constant nodes.", opset=17)
    add("prox_const_clamp_f32_ts_opset10.onnx", prox_fn(), const(), "torchscript", const_inst("var_out"),
        "TorchScript opset 10: Clip(x) with attribute min=0.0 (pre-opset-11 Clip).", opset=10)
    add("prox_const_clamp_f32_ts_opset20.onnx", prox_fn(), const(), "torchscript", const_inst("var_out"),
        "TorchScript opset 20: same as opset 17 (Clip with min input).", opset=20)
    add("prox_tensor_clamp_f32_dynopt.onnx", prox_fn(scalars="tensor"), tensor(), "dynamo-optimized",
        tensor_inst("var_out"),
        "lr, l1, l2 are 0-D float32 graph inputs: p=Sub(var, Mul(lr,delta)) (lr FIRST), t=Mul(lr,l1), "
        "Max(Sub(Abs(p),t), 0.0 init), k=Add(Mul(lr,l2), 1.0 init) (1.0 SECOND), Div(Mul(Sign(p),max), k).")
    add("prox_tensor_clamp_f32_ts.onnx", prox_fn(scalars="tensor"), tensor(), "torchscript",
        tensor_inst("var_out"),
        "TorchScript, 0-D scalar inputs: Clip(Sub(Abs(p),Mul(lr,l1)), Constant 0.0, ''), "
        "Add(Mul(lr,l2), Constant 1.0).", opset=17)
    add("prox_tensor1_clamp_f32_dynopt.onnx", prox_fn(scalars="tensor"), tensor(scalar_shape=(1,)),
        "dynamo-optimized", tensor_inst("var_out"),
        "lr, l1, l2 are shape-[1] inputs; same nodes as the 0-D case.")
    add("prox_tensor1_relu_f32_ts.onnx", prox_fn(clamp="relu", scalars="tensor"), tensor(scalar_shape=(1,)),
        "torchscript", tensor_inst("var_out"),
        "TorchScript, shape-[1] scalars, torch.relu -> Relu(Sub(Abs(p), Mul(lr,l1))).", opset=17)
    add("prox_const_maximum_f32_dynopt.onnx", prox_fn(clamp="maximum"), const(), "dynamo-optimized",
        const_inst("var_out"),
        "torch.maximum(., zeros_like(p)): Max against a FULL-SHAPE [8,16] all-zero initializer 'zeros_like' "
        "(the optimizer folded Expand(CastLike(0), Shape(p))).")
    add("prox_const_maximum_f32_ts.onnx", prox_fn(clamp="maximum"), const(), "torchscript",
        const_inst("var_out"), "TorchScript: Max against a Constant node holding a [8,16] zero tensor.",
        opset=17)
    add("prox_const_relu_f32_dynopt.onnx", prox_fn(clamp="relu"), const(), "dynamo-optimized",
        const_inst("var_out"), "torch.relu -> Relu(Sub(Abs(p), 0.001)).")
    add("prox_const_clampmin_f32_dynopt.onnx", prox_fn(clamp="clamp_min"), const(), "dynamo-optimized",
        const_inst("var_out"), "torch.clamp_min(., 0.0) -> Clip(x, 0.0 init) (min input, no max input).")
    add("prox_const_addalpha_f32_dyn.onnx", prox_fn(step="add_alpha"), const(), "dynamo",
        const_inst("var_out"),
        "var.add(delta, alpha=-lr), not optimized: Add(var, Mul(delta, CastLike(Constant -0.1, delta))).")
    add("prox_const_addalpha_f32_dynopt.onnx", prox_fn(step="add_alpha"), const(), "dynamo-optimized",
        const_inst("var_out"), "var.add(delta, alpha=-lr), optimized: Add(var, Mul(delta, -0.1 init)).")
    add("prox_const_addalpha_f32_ts.onnx", prox_fn(step="add_alpha"), const(), "torchscript",
        const_inst("var_out"), "TorchScript: Add(var, Mul(delta, Constant -0.1)).", opset=17)
    add("prox_tensor_negmul_f32_dynopt.onnx", prox_fn(step="neg_mul", scalars="tensor"), tensor(),
        "dynamo-optimized", tensor_inst("var_out"),
        "var + delta*(-lr) with a 0-D lr input: Add(var, Mul(delta, Neg(lr))).")
    add("prox_const_recip_f32_dynopt.onnx", prox_fn(scale="recip"), const(), "dynamo-optimized",
        const_inst("var_out", form="folded_reciprocal"),
        "Multiply by the precomputed reciprocal: Mul(Mul(Sign(p), Max(.,0)), 0.99502486 init).")
    add("prox_tensor_recip_f32_ts.onnx", prox_fn(scale="recip", scalars="tensor"), tensor(), "torchscript",
        tensor_inst("var_out"),
        "TorchScript, runtime reciprocal 1.0/(1+lr*l2): Mul(Mul(Sign(p),Clip(.)), Mul(Reciprocal(Add(Mul(lr,l2), "
        "Constant 1.0)), Constant 1.0)) (the tracer emits Reciprocal times 1.0; raw scalars).", opset=17)
    add("prox_const_softshrink_f32_dyn.onnx", softshrink_fn, const(), "dynamo", const_inst("var_out"),
        "F.softshrink(p, lr*l1)/(1+lr*l2) via torch._refs, not optimized: Div(Where(Greater(Abs(p),0.001), "
        "Sub(p, Mul(Sign(p),0.001)), Mul(p, Cast(Constant 0))), 1.005).")
    add("prox_const_softshrink_f32_dynopt.onnx", softshrink_fn, const(), "dynamo-optimized",
        const_inst("var_out"),
        "softshrink, optimized: Div(Where(Greater(Abs(p),t), Sub(p, Mul(Sign(p),t)), Mul(p, 0.0 init)), k); "
        "t is ONE initializer shared by Greater and Mul. Mul(p,0) keeps NaN in the else branch.")
    add("prox_folded_f32_dynopt.onnx", prox_fn(scalars="folded"), prox_args("folded", f32, gen),
        "dynamo-optimized", tensor_inst("var_out", "folded"),
        "Pre-folded threshold and divisor are 0-D inputs: Div(Mul(Sign(p), Max(Sub(Abs(p),threshold),0)), "
        "divisor), p=Sub(var, Mul(lr,delta)).")
    add("prox_folded_recip_f32_ts.onnx", prox_fn(scalars="folded_recip"), prox_args("folded_recip", f32, gen),
        "torchscript", tensor_inst("var_out", "folded_reciprocal"),
        "TorchScript, threshold and inv_divisor inputs: Mul(Mul(Sign(p), Clip(Sub(Abs(p),threshold),0)), "
        "inv_divisor).", opset=17)
    add("prox_const_clamp_f16_dynopt.onnx", prox_fn(), const(f16), "dynamo-optimized",
        const_inst("var_out", "float16"),
        "float16 without user casts: body runs in float16 with float16 initializers (0.09998, 0.0010004, "
        "1.00488), BUT Abs is wrapped: Cast(Abs(Cast(p,to=FLOAT)),to=FLOAT16) (the abs decomposition).")
    add("prox_tensor_clamp_f16_dynopt.onnx", prox_fn(scalars="tensor"), tensor(dtype=f16), "dynamo-optimized",
        tensor_inst("var_out"), "float16 tensors and float16 0-D scalar inputs; Abs wrapped in Casts.")
    add("prox_tensor_f32scalars_f16_dynopt.onnx", prox_fn(scalars="tensor"), tensor(dtype=f16, scalar_dtype=f32),
        "dynamo-optimized", tensor_inst("var_out"),
        "float16 tensors with float32 0-D scalars: type promotion keeps float16, the exporter inserts "
        "Cast(lr,to=FLOAT16) before Mul(lr,delta); scalar products computed in float32 then Cast.")
    add("prox_const_clamp_f16_ts.onnx", prox_fn(), const(f16), "torchscript", const_inst("var_out", "float16"),
        "TorchScript float16: no Casts at all, Constants float16, Clip min Constant float16.", opset=17)
    add("prox_const_clamp_bf16_cast_dynopt.onnx", prox_fn(upcast=True), const(bf16), "dynamo-optimized",
        const_inst("var_out", "float32"),
        "bfloat16 weights with the optimizer computing in float32 (master-weight style, .float() ... "
        ".to(bfloat16)): Cast(to=FLOAT) on var and delta, float32 body, Cast(to=BFLOAT16) on the output.")
    add("prox_tensor_relu_f16_cast_ts.onnx", prox_fn(clamp="relu", scalars="tensor", upcast=True),
        tensor(dtype=f16, scalar_dtype=f32), "torchscript", tensor_inst("var_out"),
        "TorchScript float16 with user upcast, float32 scalars: Cast(to=FLOAT) on var/delta, Relu, "
        "Cast(to=FLOAT16) at the end.", opset=17)
    add("prox_tensor_clamp_f32_dynamic_dynopt.onnx", prox_fn(scalars="tensor"), tensor(), "dynamo-optimized",
        tensor_inst("var_out"), "dynamic dim 0 'n' on var/delta: no shape ops.", dynamic=True)
    add("prox_const_maximum_f32_dynamic_ts.onnx", prox_fn(clamp="maximum"), const(), "torchscript",
        const_inst("var_out"),
        "TorchScript, dynamic_axes, maximum(., zeros_like(p)): the zero is ConstantOfShape(Shape(p)), a runtime "
        "full-shape zero.", opset=17, dynamic=True)

    # Near misses of the proximal family.
    add("nm_sgd_const_f32_dynopt.onnx", sgd_fn, const(), "dynamo-optimized", None,
        "Near miss: plain SGD Sub(var, Mul(delta, 0.1)).", family="near_miss")
    add("nm_sgd_tensor_f32_ts.onnx", sgd_fn, {**const(), "lr": torch.tensor(0.1)}, "torchscript", None,
        "Near miss: plain SGD Sub(var, Mul(lr, delta)) with a 0-D lr input.", opset=17, family="near_miss")
    add("nm_prox_l2_only_f32_dynopt.onnx", l2_only_fn, const(), "dynamo-optimized", None,
        "Near miss: TF's l1 == 0 branch, Div(Sub(var, Mul(delta,0.1)), 1.005): no shrink.", family="near_miss")
    add("nm_prox_abs_not_max_dynopt.onnx", prox_fn(clamp="abs"), const(), "dynamo-optimized", None,
        "Near miss: Abs(Sub(Abs(p), t)) where Max(., 0) should be.", family="near_miss")
    add("nm_prox_abs_not_max_ts.onnx", prox_fn(clamp="abs", scalars="tensor"), tensor(), "torchscript", None,
        "Near miss (TorchScript, tensor scalars): Abs in place of Clip/Max.", opset=17, family="near_miss")
    args = const()
    args["delta"] = randn(16, gen=gen)
    add("nm_prox_broadcast_delta_dynopt.onnx", prox_fn(), args, "dynamo-optimized", None,
        "Near miss: delta has shape [16] and broadcasts against var [8,16]; the fused op needs equal shapes.",
        family="near_miss",
        not_fused=[{**const_inst("var_out"), "reason": "delta broadcasts against var"}])
    add("nm_prox_softshrink_ts.onnx", softshrink_fn, const(), "torchscript", None,
        "Near miss: TorchScript's softshrink symbolic gives Add(Where(Greater(p,t), Sub(p,t), 0), "
        "Where(Less(p,-t), Add(p,t), 0)) / k: equal on finite inputs, but NaN in p gives 0 here and NaN in the "
        "fused op.", opset=17, family="near_miss",
        not_fused=[{**const_inst("var_out"), "reason": "NaN in prox gives 0, not NaN"}])
    # the group-lasso step at group size 1: equal to the update over the reals for t > 0; 0/0 at p = 0
    # when t = lr*l1 is 0
    group_lasso = ("p * relu(1 - t/|p|) / k, the group-lasso proximal step p * max(1 - t/||p||, 0) with "
                   "each element its own group: ")
    own = torch.Generator().manual_seed(26)  # its own draws: the cases after these keep theirs
    add("prox_const_group_lasso_f32_dynopt.onnx", prox_fn(shrink="group_lasso"), prox_args("const", f32, own),
        "dynamo-optimized",
        const_inst("var_out"), group_lasso + "Div(Mul(p, Relu(Sub(1, Mul(Reciprocal(Abs(p)), 0.001)))), 1.005), "
        "p = Sub(var, Mul(delta, 0.1)). Over the reals the update for t > 0; in float32 it is the shrink at "
        "t(1 +- 2^-24), varying per element, which near |p| = t is up to 100% off (2.4% one ulp above t = 0.001).")
    add("prox_const_group_lasso_f32_ts.onnx", prox_fn(shrink="group_lasso"), prox_args("const", f32, own),
        "torchscript",
        const_inst("var_out"), group_lasso + "TorchScript: Div(Mul(p, Relu(Sub(1, Div(0.001, Abs(p))))), 1.005).",
        opset=17)
    add("nm_prox_group_lasso_tensor_f32_dynopt.onnx", prox_fn(shrink="group_lasso", scalars="tensor"),
        prox_args("tensor", f32, own), "dynamo-optimized", None,
        "Near miss: " + group_lasso + "lr, l1, l2 runtime inputs: Div(Mul(p, Relu(Sub(1, Div(Mul(lr,l1), "
        "Abs(p))))), Add(Mul(lr,l2), 1)). With l1 = 0 (or lr = 0) it is 0/0 = NaN at "
        "p = 0, where the update gives 0.", family="near_miss",
        not_fused=[prox("var_out", "raw", "var", "delta", "lr", "l1", "l2",
                        reason="0/0 = NaN at p = 0 when lr*l1 = 0")])
    return c


def mixed_cases(gen: torch.Generator) -> list[Case]:
    step_attrs_opt = [
        sl1("where_1", 0.5, "mean", "add", "target", 1.0),
        prox("W_new", "raw", "W", "mm", "lr", "l1", "l2"),
        prox("b_new", "raw", "b", "view", "lr", "l1", "l2"),
    ]
    step_notes = (
        "pred = Add(MatMul(x,W),b); SmoothL1 grad Where(Less(Abs(d),0.5), Div(Mul(g,d),0.5), Mul(g,Sign(d))) "
        "with g the folded constant mul_1=1/64 (FIRST Mul operand); gW=MatMul(Transpose(x),where_1), "
        "gb=Reshape(ReduceSum(where_1,[0])); two prox updates Div(Mul(Sign(q), Max(Sub(Abs(q), mul_5), 0)), add_1), "
        "q=Sub(W, Mul(lr, mm)). CSE shares mul_5=Mul(lr,l1) and add_1=Add(Mul(lr,l2),1) between the two updates: "
        "attrs bind the raw inputs lr, l1, l2 (the shared scalar products stay for the other consumer or go "
        "dead); binding mul_5/add_1 as 'folded' threshold/divisor is equivalent. SmoothL1: g = 1/64 = 1/numel, so "
        "reduction 'mean' with dout 1.0.")
    cases = [
        Case(str(SAMPLES / "box_head_train_step.onnx"), BoxHeadStep(), step_args(gen), "dynamo-optimized", "mixed",
             step_attrs_opt, "Sample model. " + step_notes, outputs=["W_new", "b_new"]),
        Case(fx("mixed_box_head_step_with_loss_dyn.onnx"), BoxHeadStep(return_loss=True), step_args(gen), "dynamo",
             "mixed",
             [sl1("where_1", 0.5, "mean", "add", "target", "ones_like"),
              prox("W_new", "raw", "W", "mm", "lr", "l1", "l2"),
              prox("b_new", "raw", "b", "view", "lr", "l1", "l2")],
             "Not optimized, loss returned: the forward loss has its own Sub/Abs/Less, so the backward "
             "(Sub sub_2, Abs abs_2, Less lt_1) shares nothing with it; dout = ones_like (Expand) * Constant 1/64; "
             "W and b pass through Identity (detach) before MatMul/Add; every prox update has its own Mul(lr,l1) "
             "and Add(Mul(lr,l2), Cast(1)).", outputs=["W_new", "b_new", "loss"]),
        Case(fx("mixed_box_head_step_with_loss_dynopt.onnx"), BoxHeadStep(return_loss=True), step_args(gen),
             "dynamo-optimized", "mixed", [sl1("where_1", 0.5, "mean", "add", "target", 1.0), *step_attrs_opt[1:]],
             "Optimized, loss returned: CSE merges the forward's and the backward's Sub(add,target), Abs and "
             "Less(Abs,0.5), so the SmoothL1 backward's intermediates feed the loss (Pow/ReduceMean) too: the "
             "backward fuses and they are computed again for the loss (recompute_shared, the default); the two "
             "prox updates fuse as well. " + step_notes,
             outputs=["W_new", "b_new", "loss"]),
        Case(fx("mixed_two_heads_dynopt.onnx"), TwoHeadStep(),
             {"x": randn(12, 6, gen=gen), "t1": randn(12, 4, gen=gen), "t2": randn(12, 3, gen=gen),
              "W1": randn(6, 4, scale=0.5, gen=gen), "b1": randn(4, scale=0.1, gen=gen),
              "W2": randn(6, 3, scale=0.5, gen=gen), "b2": randn(3, scale=0.1, gen=gen),
              "lr": torch.tensor(0.1), "l1": torch.tensor(0.01), "l2": torch.tensor(0.05)},
             "dynamo-optimized", "mixed",
             [sl1("where", 0.5, "mean", "add", "t1", 1.0), sl1("where_1", 2.0, "sum", "add_1", "t2", 1.0),
              prox("W1_new", "raw", "W1", "matmul_2", "lr", "l1", "l2"),
              prox("b1_new", "raw", "b1", "sum_1", "lr", "l1", "l2"),
              prox("W2_new", "raw", "W2", "matmul_3", "lr", "l1", "l2"),
              prox("b2_new", "raw", "b2", "sum_2", "lr", "l1", "l2")],
             "Two heads with the aten op and grad_output = torch.ones(()): head 1 (mean, beta 0.5): ones*1/48 "
             "folded into one initializer, the FIRST Mul operand: Where(Less(Abs(d),0.5), Div(Mul(0.0208333,d),0.5), "
             "Mul(0.0208333,Sign(d))); head 2 (sum, beta 2): g=1 vanishes: Where(Less(Abs(d),2), Div(d,2), Sign(d)). "
             "gb = ReduceSum(where,[0],keepdims=0) (no Reshape). Four prox updates share mul_7=Mul(lr,l1) and "
             "add_2=Add(Mul(lr,l2),1) (CSE); Transpose(x) is shared by both heads' MatMuls.",
             outputs=["W1_new", "b1_new", "W2_new", "b2_new"]),
        Case(fx("mixed_two_heads_ts.onnx"), TwoHeadStepHand(),
             {"x": randn(12, 6, gen=gen), "t1": randn(12, 4, gen=gen), "t2": randn(12, 3, gen=gen),
              "W1": randn(6, 4, scale=0.5, gen=gen), "b1": randn(4, scale=0.1, gen=gen),
              "W2": randn(6, 3, scale=0.5, gen=gen), "b2": randn(3, scale=0.1, gen=gen),
              "lr": torch.tensor(0.1), "l1": torch.tensor(0.01), "l2": torch.tensor(0.05)},
             "torchscript", "mixed",
             [sl1("/Where_output_0", 0.5, "mean", "/Add_output_0", "t1", 1.0),
              sl1("/Where_1_output_0", 2.0, "sum", "/Add_1_output_0", "t2", 1.0),
              prox("W1_new", "raw", "W1", "/MatMul_2_output_0", "lr", "l1", "l2"),
              prox("b1_new", "raw", "b1", "/ReduceSum_output_0", "lr", "l1", "l2"),
              prox("W2_new", "raw", "W2", "/MatMul_3_output_0", "lr", "l1", "l2"),
              prox("b2_new", "raw", "b2", "/ReduceSum_1_output_0", "lr", "l1", "l2")],
             "TorchScript, hand-written SmoothL1 grads with grad_output = torch.ones(()): the tracer folds "
             "ones/48 into Constant 0.0208333 (head 1) and ones into Constant 1.0 (head 2), both as the FIRST "
             "Mul operand: Where(Less(Abs(d),0.5), Div(Mul(c,d),0.5), Mul(c,Sign(d))); the Mul by 1.0 is kept. "
             "Four prox updates with Clip(., Constant 0, '') share /Mul_5=Mul(lr,l1) and /Add_2=Add(Mul(lr,l2),1) "
             "(the TorchScript exporter deduplicates them too).", opset=17,
             outputs=["W1_new", "b1_new", "W2_new", "b2_new"]),
        Case(fx("mixed_large_frozen_backbone_dynopt.onnx"), FrozenBackboneStep(64, 128),
             {"x": randn(64, 64, gen=gen), "target": randn(64, 32, gen=gen), "W": randn(128, 32, scale=0.1, gen=gen),
              "b": randn(32, scale=0.1, gen=gen), "lr": torch.tensor(0.1), "l1": torch.tensor(0.01),
              "l2": torch.tensor(0.05)},
             "dynamo-optimized", "mixed",
             [sl1("where_1", 1.0, "mean", "add", "target", 1.0),
              prox("W_new", "raw", "W", "mm", "lr", "l1", "l2"),
              prox("b_new", "raw", "b", "view", "lr", "l1", "l2")],
             "Larger: frozen Linear(64,128) backbone as initializers (Gemm/Relu), head W [128,32] = 4096 elements, "
             "pred [64,32] = 2048 elements. SmoothL1 beta 1 so Div(.,1) is gone: Where(Less(Abs(d),1), "
             "Mul(g,d), Mul(g,Sign(d))), g = initializer mul_1 = 1/2048 (FIRST Mul operand). The optimizer "
             "deduplicated the constant 1.0: one initializer is both SmoothL1's beta (Less) and the prox's '1 +' "
             "(Add). Prox updates share mul_5=Mul(lr,l1) and add_1 (CSE).", outputs=["W_new", "b_new"]),
    ]
    return cases


def sample_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case(str(SAMPLES / "smooth_l1_grad_mean.onnx"), aten_sl1("mean", 0.5),
             sl1_args("mean", torch.float32, gen, shape=(8, 16)), "dynamo-optimized", "smooth_l1_grad",
             [sl1("grad", 0.5, "mean", "p", "t", "go")],
             "Sample: aten.smooth_l1_loss_backward(go, p, t, mean, beta=0.5) on [8,16].", outputs=["grad"]),
        Case(str(SAMPLES / "proximal_update.onnx"), prox_fn(scalars="tensor"),
             prox_args("tensor", torch.float32, gen, shape=(16, 32)), "dynamo-optimized", "proximal_gd",
             [prox("var_out", "raw", "var", "delta", "lr", "l1", "l2")],
             "Sample: proximal update of a [16,32] weight with runtime lr, l1, l2.", outputs=["var_out"]),
    ]


# ----------------------------------------------------------------------------------------------
# Export, describe, verify.

def export(case: Case) -> onnx.ModelProto:
    module = case.fn if isinstance(case.fn, torch.nn.Module) else Fn(case.fn)
    names = list(case.args)
    args = tuple(case.args.values())
    if case.exporter.startswith("dynamo"):
        kwargs: dict = {}
        if case.dynamic:
            dims = {d: torch.export.Dim(d) for axes in case.dynamic.values() for d in axes.values()}
            spec = tuple({a: dims[d] for a, d in case.dynamic.get(n, {}).items()} for n in names)
            kwargs["dynamic_shapes"] = spec if isinstance(case.fn, torch.nn.Module) else (spec,)
        program = torch.onnx.export(module, args, dynamo=True, optimize=case.exporter == "dynamo-optimized",
                                    opset_version=case.opset, input_names=names, output_names=case.outputs,
                                    verbose=False, **kwargs)
        model = program.model_proto
    else:
        buffer = io.BytesIO()
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=case.opset, input_names=names,
                          output_names=case.outputs, dynamic_axes=case.dynamic or None, **case.ts_kwargs)
        model = onnx.load_from_string(buffer.getvalue())
    _strip_stack_traces(model)
    if case.outputs and [o.name for o in model.graph.output] != case.outputs:
        _rename_outputs(model, case.outputs)
    # the TorchScript exporter writes module functions, and numbers their nodes, in set order,
    # which changes between runs: functions are sorted and their nodes named by position
    ordered = sorted((onnx.FunctionProto.FromString(f.SerializeToString()) for f in model.functions),
                     key=lambda f: (f.domain, f.name, f.overload))
    for f in ordered:
        _canonical_names(f)
    del model.functions[:]
    model.functions.extend(ordered)
    return model


def _canonical_names(f: onnx.FunctionProto) -> None:
    """Names a function's nodes and values by position: TorchScript names them after values of the
    graph it deduplicated them from, which change from run to run."""
    names = {name: f"in{k}" for k, name in enumerate(f.input)}
    for k, node in enumerate(f.node):
        node.name = f"{node.op_type}_{k}"
        for j, out in enumerate(node.output):
            if out:
                names[out] = f"{node.op_type}_{k}_out{j}"
    for node in f.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    f.input[:] = [names[n] for n in f.input]
    f.output[:] = [names[n] for n in f.output]


def _rename_outputs(model: onnx.ModelProto, names: list[str]) -> None:
    """Gives the graph outputs the case's names, where the exporter ignored output_names (with
    module functions it numbers them, and the numbers change between runs)."""
    rename = dict(zip([o.name for o in model.graph.output], names))
    for node in model.graph.node:
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename.get(n, n) for n in node.output]
    for o in model.graph.output:
        o.name = rename[o.name]


def _strip_stack_traces(model: onnx.ModelProto) -> None:
    """Drop source-file stack traces: they hold local paths and line numbers, not graph facts."""
    for node in model.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        node.doc_string = ""


def input_specs(case: Case, model: onnx.ModelProto) -> dict[str, dict]:
    specs = {}
    graph_inputs = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    for name, tensor in case.args.items():
        if name not in graph_inputs:
            continue
        spec: dict = {"shape": case.run_shapes.get(name, list(tensor.shape)), "dtype": TORCH_TO_NAME[tensor.dtype]}
        if name in SCALAR_RANGES:
            spec["range"] = list(SCALAR_RANGES[name])
        elif tensor.dim() > 0 and name in ("W", "W1", "W2"):
            spec["scale"] = 0.5
        elif tensor.dim() > 0 and name in ("b", "b1", "b2"):
            spec["scale"] = 0.1
        specs[name] = spec
    return specs


def softshrink_exact_fn(var: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """F.softshrink with constants exact in float16, so the compared and the shifted threshold agree."""
    return F.softshrink(var - 0.125 * delta, 0.0625) / 1.03125


def where_zeros_fn(var: torch.Tensor, delta: torch.Tensor, lr: torch.Tensor, l1: torch.Tensor,
                   l2: torch.Tensor) -> torch.Tensor:
    p = var - lr * delta
    t = lr * l1
    return torch.where(p.abs() > t, p - t * p.sign(), torch.zeros_like(p)) / (1 + lr * l2)


def user_code_spelling_cases() -> list[Case]:
    """Spellings of exported user code: a tensor maximum clamp, float16 softshrink, zeros in a Where
    branch, a select scaled afterwards; own generator, so the cases before keep their inputs.
    (Native bfloat16 graphs of these forms are tested hand-built: onnxruntime's CPU provider has no
    bfloat16 Sub to check a fixture with.)"""
    gen = torch.Generator().manual_seed(1203)
    f32, f16 = torch.float32, torch.float16
    c: list[Case] = []

    def hand(name: str, fn: Callable[..., object], reduction: str, beta: float, exporter: str, dtype: torch.dtype,
             notes: str, opset: int | None = None) -> None:
        c.append(Case(fx(name), fn, sl1_args(reduction, dtype, gen), exporter, "smooth_l1_grad",
                      [sl1("grad", beta, reduction, "p", "t", "go")], notes, opset=opset,
                      dtype=TORCH_TO_NAME[dtype], outputs=["grad"]))

    hand("sl1_hand_clamp_mean_b2_f32_dyn.onnx", hand_sl1_clip("mean", 2.0), "mean", 2.0, "dynamo", f32,
         "torch.clamp(d/2, -1, 1) * go/numel, not optimized: Min(Max(Div(d,2), CastLike(-1)), CastLike(1)) "
         "instead of Clip, then Div(Mul(clamp, go), 20.0) (mean as a final Div).")
    hand("sl1_hand_where_sum_b03_f16_dynopt.onnx", hand_sl1("sum", 0.3), "sum", 0.3, "dynamo-optimized", f16,
         "Native float16, beta 0.3: compares with 0.3 in float32 but divides by 0.3 rounded to float16 "
         "(0.30005); equal within float16's rounding.")
    args = prox_args("tensor", f32, gen)
    c.append(Case(fx("prox_tensor_maximum_f32_dyn.onnx"), prox_fn(clamp="maximum", scalars="tensor"), args,
                  "dynamo", "proximal_gd", [prox("var_out", "raw", "var", "delta", "lr", "l1", "l2")],
                  "maximum(., zeros_like(p)), not optimized: the zero is Expand(CastLike(0), Shape(p)).",
                  outputs=["var_out"]))
    args = prox_args("const", f16, gen)
    c.append(Case(fx("prox_softshrink_exact_f16_dynopt.onnx"), softshrink_exact_fn, args, "dynamo-optimized",
                  "proximal_gd",
                  [prox("var_out", "folded_reciprocal", "var", "delta", 0.125, 0.0625, stored(1 / 1.03125))],
                  "Native float16 softshrink: Greater(Cast<float32>(|p| in float16), 0.0625) beside "
                  "Mul(Sign(p), 0.0625 float16).", dtype="float16", outputs=["var_out"]))
    args = prox_args("tensor", f32, gen)
    c.append(Case(fx("nm_prox_where_zeros_f32_dynopt.onnx"), where_zeros_fn, args, "dynamo-optimized",
                  "near_miss", [],
                  "Near miss: Where(|p| > t, p - t*sign(p), zeros_like(p)) / k: NaN in p gives 0 here and NaN in "
                  "the fused op (softshrink's p*0 keeps it).", outputs=["var_out"],
                  not_fused=[prox("var_out", "raw", "var", "delta", "lr", "l1", "l2",
                                  reason="softshrink with 0, not p*0")]))
    return c


def where_then_scale_fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The SmoothL1 gradient with dout and the mean applied after the select, as users write it."""
    x = p - t
    return torch.where(x.abs() < 0.5, x / 0.5, torch.sign(x)) * go / p.numel()


def sign_and_threshold_spelling_cases() -> list[Case]:
    """Spellings of exported user code: torch.sgn in float16, F.threshold as the clamp, masks and
    Huber clamps written by hand; own generator, so the cases before keep their inputs. (torch.sgn
    on bfloat16 gives the same Cast sandwich as on float16; it is tested hand-built, for want of a
    bfloat16 Sub in onnxruntime's CPU provider.)"""
    gen = torch.Generator().manual_seed(1204)
    f32, f16 = torch.float32, torch.float16
    c: list[Case] = []

    def add(name: str, fn: Callable[..., torch.Tensor], dtype: torch.dtype, exporter: str, inst: dict | None,
            notes: str, not_fused: list[dict] | None = None) -> None:
        c.append(Case(fx(name), fn, prox_args("const", dtype, gen), exporter, "proximal_gd" if inst else "near_miss",
                      [inst] if inst else [], notes, dtype=TORCH_TO_NAME[dtype], outputs=["var_out"],
                      not_fused=not_fused or []))

    def inst(dtype: str = "float32") -> dict:
        return prox("var_out", "folded", "var", "delta", stored(LR, dtype), stored(LR * L1, dtype),
                    stored(1 + LR * L2, dtype))

    add("prox_const_threshold_f32_dynopt.onnx", prox_fn(clamp="threshold"), f32, "dynamo-optimized", inst(),
        "F.threshold(|p| - t, 0, 0): Where(LessOrEqual(d, 0.0), 0.0, d), where NaN selects d as Max(d, 0) does.")
    add("prox_const_threshold_f32_dyn.onnx", prox_fn(clamp="threshold"), f32, "dynamo", inst(),
        "F.threshold, not optimized: the same Where with CastLike'd constants.")
    add("prox_const_sgn_f16_dynopt.onnx", prox_fn(sign="sgn"), f16, "dynamo-optimized", inst("float16"),
        "torch.sgn of a float16 p: Cast<float16>(Sign(Cast<float32>(p))), the Abs beside it likewise "
        "(normalization narrows that one back to Abs(p)).")
    add("nm_prox_where_gt_f32_dynopt.onnx", prox_fn(clamp="where_gt"), f32, "dynamo-optimized",
        prox("var_out", "folded", "var", "delta", LR, LR * L1, 1 + LR * L2),
        "torch.where(d > 0, d, 0) as the clamp: NaN in d gives 0 there, where Max(d, 0) gives NaN, but the "
        "update multiplies it by sign(p), which is NaN too, so the whole update equals the fused op: the "
        "patterns refuse the clamp alone, the recogniser fuses the update (a near miss for the patterns, "
        "hence the name).")
    c.append(Case(fx("sl1_hand_sgn_sum_b05_f16_dynopt.onnx"), hand_sl1("sum", 0.5, sign="sgn"),
                  sl1_args("sum", f16, gen), "dynamo-optimized", "smooth_l1_grad",
                  [sl1("grad", 0.5, "sum", "p", "t", "go")],
                  "torch.sgn of a float16 x: Cast<float16>(Sign(Cast<float32>(x))) beside the float16 Where.",
                  dtype="float16", outputs=["grad"]))
    for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
        c.append(Case(fx(f"sl1_hand_where_then_scale_mean_b05_f32_{suffix}.onnx"), where_then_scale_fn,
                      sl1_args("mean", f32, gen), exporter, "smooth_l1_grad",
                      [sl1("grad", 0.5, "mean", "p", "t", "go")],
                      "Where(|x| < 0.5, x/0.5, sign(x)) * go / numel: dout and the mean after the select.",
                      outputs=["grad"]))
    return c


def sign_min_fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    x = p - t
    return x.sign() * torch.minimum(x.abs() / 0.5, torch.ones_like(x)) * go


def mask_sl1_fn(masks: str) -> Callable[..., torch.Tensor]:
    """The SmoothL1 gradient (sum, beta 0.5) with the select written as float masks."""
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = p - t
        small = (x.abs() < 0.5).float()
        large = (x.abs() >= 0.5).float() if masks == "two" else 1 - small
        return (small * x / 0.5 + large * x.sign()) * go
    return fn


def huber_clamp_fn(delta: float) -> Callable[..., torch.Tensor]:
    """The Huber loss gradient as users write it: clamp(x, -delta, delta) * go, mean-reduced."""
    def fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.clamp(p - t, -delta, delta) * go / p.numel()
    return fn


class SL1GradModule(torch.nn.Module):
    def __init__(self, reduction: str, beta: float) -> None:
        super().__init__()
        self.grad = hand_sl1(reduction, beta)

    def forward(self, go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.grad(go, p, t)


class ProxModule(torch.nn.Module):
    def forward(self, w: torch.Tensor, g: torch.Tensor, lr: torch.Tensor, l1: torch.Tensor,
                l2: torch.Tensor) -> torch.Tensor:
        return _prox_update(w, g, lr, l1, l2)


class BiasProxModule(ProxModule):
    """The bias's update as a class of its own: two instances of one class become functions named
    in set order (ProxModule, ProxModule.1), which changes from run to run."""


class ModularStep(torch.nn.Module):
    """A box-head step whose SmoothL1 gradient and prox updates are submodules, which the
    TorchScript exporter's export_modules_as_functions turns into model-local functions."""

    def __init__(self) -> None:
        super().__init__()
        self.sl1, self.prox_w, self.prox_b = SL1GradModule("mean", 0.5), ProxModule(), BiasProxModule()

    def forward(self, x: torch.Tensor, target: torch.Tensor, W: torch.Tensor, b: torch.Tensor,
                lr: torch.Tensor, l1: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        g = self.sl1(torch.ones((), dtype=x.dtype), x @ W + b, target)
        return self.prox_w(W, x.t() @ g, lr, l1, l2), self.prox_b(b, g.sum(0), lr, l1, l2)


def function_and_clamp_residual_cases() -> list[Case]:
    """Patterns inside model-local functions, and clamp residuals; own generator, so the cases
    before keep their inputs."""
    gen = torch.Generator().manual_seed(3204)
    modules = {"export_modules_as_functions": {SL1GradModule, ProxModule, BiasProxModule}}
    cases = [Case(fx("mixed_modular_step_functions_ts.onnx"), ModularStep(), step_args(gen), "torchscript", "mixed",
                 [sl1("/sl1/SL1GradModule_output_0", 0.5, "mean", "/Add_output_0", "target", 1.0),
                  prox("W_new", "raw", "W", "/MatMul_1_output_0", "lr", "l1", "l2"),
                  prox("b_new", "raw", "b", "/ReduceSum_output_0", "lr", "l1", "l2")],
                 "TorchScript with export_modules_as_functions: the main graph calls model-local functions "
                 "SL1GradModule (Where(Less(Abs(d),0.5), Div(Mul(c,d),0.5), Mul(c,Sign(d))), c = 1/64) and "
                 "ProxModule and BiasProxModule (the second takes Mul(lr,l1) and Add(Mul(lr,l2),1) from the "
                 "first call's extra outputs: the exporter deduplicates across modules). The pass inlines the "
                 "calls to see inside. The exporter ignores output_names with module "
                 "functions (it numbers the outputs, differently from run to run): make_models names them.",
                 opset=17, outputs=["W_new", "b_new"],
                 ts_kwargs=modules)]
    const = prox("var_out", "folded", "var", "delta", LR, LR * L1, 1 + LR * L2)
    for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
        cases.append(Case(fx(f"prox_const_clamp_residual_f32_{suffix}.onnx"), prox_fn(shrink="residual"),
                          prox_args("const", torch.float32, gen), exporter, "proximal_gd", [const],
                          "ISTA's soft threshold p - clamp(p, -t, t) with a constant t, then / k: Clip(p, -t, t) "
                          "with constant bounds.", outputs=["var_out"]))
    for name, fn in (("clamp", prox_fn(shrink="residual", scalars="tensor")),
                     ("minmax", prox_fn(shrink="residual_minmax", scalars="tensor"))):
        cases.append(Case(fx(f"nm_prox_tensor_{name}_residual_f32_dynopt.onnx"), fn,
                          prox_args("tensor", torch.float32, gen), "dynamo-optimized", "near_miss", [],
                          "Near miss: p - clamp(p, -t, t) with t = lr*l1 at runtime: equal to the shrink only for "
                          "t >= 0, which nothing in the graph says.", outputs=["var_out"],
                          not_fused=[{**prox("var_out", "raw", "var", "delta", "lr", "l1", "l2"),
                                      "reason": "t is a runtime value"}]))
    for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
        cases.append(Case(fx(f"sl1_hand_huber_clamp_mean_d2_f32_{suffix}.onnx"), huber_clamp_fn(2.0),
                          sl1_args("mean", torch.float32, gen), exporter, "smooth_l1_grad",
                          [sl1("grad", 2.0, "mean", "p", "t", "go", scale=2.0)],
                          "The Huber gradient written as clamp(x, -delta, delta) * go / numel: Clip(Sub(p,t), -2, 2), "
                          "a SmoothL1 gradient with beta = delta scaled by delta.", outputs=["grad"]))
    for masks, note in (("two", "(|x| < 0.5).float() and (|x| >= 0.5).float(): Cast(Less) and Cast(GreaterOrEqual)"),
                        ("one_minus", "m = (|x| < 0.5).float() and 1 - m: Cast(Less) and Sub(1, Cast)")):
        for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
            cases.append(Case(fx(f"sl1_hand_masks_{masks}_sum_b05_f32_{suffix}.onnx"), mask_sl1_fn(masks),
                              sl1_args("sum", torch.float32, gen), exporter, "smooth_l1_grad",
                              [sl1("grad", 0.5, "sum", "p", "t", "go")],
                              f"The select written with float masks by hand, {note}: "
                              "(m * x/0.5 + m' * sign(x)) * go, an arithmetic select.", outputs=["grad"]))
    for form, note in (("masked", "(p - t*sign(p)) * (|p| > t).float(): softshrink with a float mask"),
                       ("relu_difference", "relu(p - t) - relu(-p - t), LISTA's soft threshold")):
        for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
            cases.append(Case(fx(f"prox_const_{form}_f32_{suffix}.onnx"), prox_fn(shrink=form),
                              prox_args("const", torch.float32, gen), exporter, "proximal_gd", [const],
                              f"{note}, with Python-float hyperparameters, then / k.", outputs=["var_out"]))
    for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
        cases.append(Case(fx(f"sl1_hand_sign_min_sum_b05_f32_{suffix}.onnx"), sign_min_fn,
                          sl1_args("sum", torch.float32, gen), exporter, "smooth_l1_grad",
                          [sl1("grad", 0.5, "sum", "p", "t", "go")],
                          "sign(x) * torch.minimum(|x|/0.5, torch.ones_like(x)) * go: the gradient's magnitude "
                          "capped at 1 (the 1 is a full tensor of ones from ones_like).", outputs=["grad"]))
    return cases


def repeated_step_fn(step: str) -> Callable[..., torch.Tensor]:
    """The update with p = var - lr*delta written out at each of its two uses: dynamo without its
    optimizer repeats p's nodes, each copy with constants of its own (CastLike'd literals for
    torch.sub's alpha, one lifted tensor per torch.tensor for addcmul's value)."""
    def p(var: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        if step == "sub_alpha":
            return torch.sub(var, delta, alpha=LR)
        return torch.addcmul(var, delta, torch.tensor(-LR))

    def fn(var: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return torch.sign(p(var, delta)) * torch.relu(p(var, delta).abs() - LR * L1) / (1 + LR * L2)
    return fn


def sliced_sl1_fn(go: torch.Tensor, head: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The SmoothL1 gradient of the box columns head[:, :4] of a head's output, sliced at each use."""
    def x() -> torch.Tensor:
        return head[:, :4] - t
    return torch.where(x().abs() < 0.5, x() / 0.5, x().sign()) * go / t.numel()


def repeated_expression_cases() -> list[Case]:
    """Expressions repeated per use, whose copies merge only once their equal constants do; own
    generator, so the cases before keep their inputs."""
    gen = torch.Generator().manual_seed(4204)
    const = prox("var_out", "folded", "var", "delta", LR, LR * L1, 1 + LR * L2)
    cases = [Case(fx(f"prox_const_{step}_repeated_f32_dyn.onnx"), repeated_step_fn(step),
                  prox_args("const", torch.float32, gen), "dynamo", "proximal_gd", [const], note, outputs=["var_out"])
             for step, note in (
                 ("sub_alpha", "sign(p) * relu(|p| - t) / k with p = torch.sub(var, delta, alpha=lr) at each use: "
                               "two Sub(var, Mul(delta, CastLike(lr))) chains, each with its own CastLike."),
                 ("addcmul", "The same with p = torch.addcmul(var, delta, torch.tensor(-lr)) at each use: two "
                             "chains, each reading its own lifted tensor -lr."))]
    raw = prox("var_out", "raw", "var", "delta", "lr", "l1", "l2")
    for exporter, suffix in (("dynamo-optimized", "dynopt"), ("dynamo", "dyn"), ("torchscript", "ts")):
        cases.append(Case(fx(f"prox_tensor_addalpha_f32_{suffix}.onnx"), prox_fn(step="add_alpha", scalars="tensor"),
                          prox_args("tensor", torch.float32, gen), exporter, "proximal_gd", [raw],
                          "p = var.add(delta, alpha=-lr) with a tensor lr: dynamo reads the number from the tensor "
                          "with Gather(Reshape(Neg(lr), [-1]), 0), which is Neg(lr) for a 0-D lr.",
                          outputs=["var_out"]))
    cases.append(Case(fx("nm_prox_tensor_clamp_residual_f32_dyn.onnx"), prox_fn(shrink="residual", scalars="tensor"),
                      prox_args("tensor", torch.float32, gen), "dynamo", "near_miss", [],
                      "Near miss: p - clamp(p, -t, t) with t = lr*l1 at runtime, not optimized: the bounds are "
                      "CastLike(Neg(t), p) and CastLike(t, p), casts to the type they have.", outputs=["var_out"],
                      not_fused=[{**raw, "reason": "t is a runtime value"}]))
    for dtype in (torch.float32, torch.float16):
        name = TORCH_TO_NAME[dtype]
        cases.append(Case(fx(f"sl1_hand_sign_min_sum_b05_{name.replace('float', 'f')}_dyn.onnx"), sign_min_fn,
                          sl1_args("sum", dtype, gen), "dynamo", "smooth_l1_grad",
                          [sl1("grad", 0.5, "sum", "p", "t", "go")],
                          "sign(x) * torch.minimum(|x|/0.5, torch.ones_like(x)) * go, not optimized: ones_like is "
                          "Expand(CastLike(1, x), Shape(x, start=0)).", dtype=name, outputs=["grad"]))
    # only the optimized export: unoptimized, the constants are float32 literals cast to float16 at
    # runtime, and onnxruntime, whose CPU provider runs float16 Add/Sub/Mul/Div in float32, drops that
    # Cast with its own cast back, so its reference computes with the unrounded literal
    for exporter, suffix in (("dynamo-optimized", "dynopt"),):
        cases.append(Case(fx(f"prox_const_threshold_f16_{suffix}.onnx"), prox_fn(clamp="threshold"),
                          prox_args("const", torch.float16, gen), exporter, "proximal_gd",
                          [prox("var_out", "folded", "var", "delta", stored(LR, "float16"), stored(LR * L1, "float16"),
                                stored(1 + LR * L2, "float16"))],
                          "F.threshold(|p| - t, 0, 0) on float16: the Where runs in float32 between a widening Cast "
                          "and a Cast back, which is max(d, 0) exactly.", dtype="float16", outputs=["var_out"]))
    f32_mask = "a float32 mask times widened values"
    cases.append(Case(fx("nm_sl1_hand_masks_two_sum_b05_f16_dynopt.onnx"), mask_sl1_fn("two"),
                      sl1_args("sum", torch.float16, gen), "dynamo-optimized", "near_miss", [],
                      "Near miss: (|x| < 0.5).float() * x / 0.5 + (|x| >= 0.5).float() * sign(x) on float16 p and t: "
                      "the float32 masks make the gradient float32, but x was rounded to float16 first.",
                      dtype="float16", outputs=["grad"],
                      not_fused=[sl1("grad", 0.5, "sum", "p", "t", "go", reason=f32_mask)]))
    cases.append(Case(fx("nm_prox_tensor_masked_f16_dynopt.onnx"), prox_fn(shrink="masked", scalars="tensor"),
                      prox_args("tensor", torch.float16, gen), "dynamo-optimized", "near_miss", [],
                      "Near miss: (p - t*sign(p)) * (|p| > t).float() on a float16 var: the float32 mask makes the "
                      "update float32, but p - t*sign(p) was rounded to float16 first.", dtype="float16",
                      outputs=["var_out"], not_fused=[{**raw, "reason": f32_mask}]))
    args = {"go": torch.ones(()), "head": randn(16, 6, gen=gen), "t": randn(16, 4, gen=gen)}
    cases.append(Case(fx("sl1_hand_where_sliced_mean_b05_f32_dyn.onnx"), sliced_sl1_fn, args, "dynamo",
                      "smooth_l1_grad", [sl1("grad", 0.5, "mean", "slice_1", "t", "go")],
                      "Where(|x| < 0.5, x/0.5, sign(x)) * go / numel with x = head[:, :4] - t written at each use: "
                      "three Slices, each with its own Reshape(Cast(Constant)) index chains.", outputs=["grad"]))
    return cases


class ModularNet(torch.nn.Module):
    """ModularStep behind a Linear + ReLU backbone, exported with export_modules_as_functions=True:
    every module, the top one too, becomes a model-local function."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(11)
        self.backbone = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        with torch.no_grad():
            self.backbone[0].weight.copy_(torch.randn(8, 8, generator=gen) / 8**0.5)
            self.backbone[0].bias.copy_(torch.randn(8, generator=gen) * 0.1)
        self.sl1, self.prox = SL1GradModule("mean", 0.5), ProxModule()

    def forward(self, x: torch.Tensor, target: torch.Tensor, W: torch.Tensor, lr: torch.Tensor,
                l1: torch.Tensor, l2: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        g = self.sl1(torch.ones((), dtype=x.dtype), f @ W, target)
        return self.prox(W, f.t() @ g, lr, l1, l2)


# Models outside the manifest: their patterns sit inside functions, so the values the manifest would
# name exist only once the pass has inlined them (tests/lowering/test_pass_functions.py checks them).
FUNCTION_FIXTURES = Path("tests/fixtures/functions")


def softshrink_user_fn(form: str) -> Callable[..., torch.Tensor]:
    """Softshrink spellings of user code, then / k (Python-float scalars)."""
    def fn(var: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        p, t = var - LR * delta, LR * L1
        if form == "where_small":
            out = torch.where(p.abs() <= t, torch.zeros_like(p), p - torch.sign(p) * t)
        elif form == "clamp_plus":
            out = torch.clamp(p - t, min=0) + torch.clamp(p + t, max=0)
        elif form == "clamp_difference":
            out = torch.clamp(p - t, min=0) - torch.clamp(-p - t, min=0)
        elif form == "sign_abs_mask":
            out = torch.sign(p) * (p.abs() - t) * (p.abs() > t).to(p.dtype)
        elif form == "min_residual":
            out = p - torch.sign(p) * torch.clamp(p.abs(), max=t)
        elif form == "abs_minus_min":
            out = torch.sign(p) * (p.abs() - torch.clamp(p.abs(), max=t))
        elif form == "nested_where":
            out = torch.where(p > t, p - t, torch.where(p < -t, p + t, p * 0))
        elif form == "clamp_inf":
            out = torch.sign(p) * torch.clamp(p.abs() - t, 0, float("inf"))
        else:
            out = F.softshrink(p, t)
        return out / (1 + LR * L2)
    return fn


def autograd_hand_sl1(style: str, reduction: str, beta: float) -> Callable[..., torch.Tensor]:
    """The gradient, by torch.autograd.grad, of a SmoothL1 loss written by hand as detection code
    writes it: fvcore/torchvision (0.5 * n**2 / beta) or mmdet (0.5 * n * n / beta)."""
    def fn(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            q = p.detach().requires_grad_(True)
            n = torch.abs(q - t)
            inside = 0.5 * n ** 2 / beta if style == "fvcore" else 0.5 * n * n / beta
            loss = torch.where(n < beta, inside, n - 0.5 * beta)
            loss = loss.mean() if reduction == "mean" else loss.sum()
            return torch.autograd.grad(loss, q)[0]
    return fn


def autograd_huber_none_fn(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():
        q = p.detach().requires_grad_(True)
        return torch.autograd.grad(F.huber_loss(q, t, reduction="none", delta=0.5).sum(), q)[0]


def sign_clampmax_fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    x = p - t
    return x.sign() * torch.clamp(x.abs() / 0.5, max=1.0) * go / x.numel()


def const_shrink_cases(gen: torch.Generator, table) -> list[Case]:
    """One float32 proximal case per (form, ((exporter, suffix), ...), note) row, the shrink written
    as softshrink_user_fn(form) with Python-float scalars."""
    const = prox("var_out", "folded", "var", "delta", LR, LR * L1, 1 + LR * L2)
    return [Case(fx(f"prox_const_{form}_f32_{suffix}.onnx"), softshrink_user_fn(form),
                 prox_args("const", torch.float32, gen),
                 exporter, "proximal_gd", [const], note, outputs=["var_out"])
            for form, exporters, note in table for exporter, suffix in exporters]


def softshrink_and_autograd_cases() -> list[Case]:
    """Softshrink spellings, autograd of hand-written SmoothL1 losses and capped ratios; own
    generator."""
    gen = torch.Generator().manual_seed(5205)
    const = prox("var_out", "folded", "var", "delta", LR, LR * L1, 1 + LR * L2)
    cases = const_shrink_cases(gen, (
            ("where_small", (("dynamo-optimized", "dynopt"),),
             "torch.where(|p| <= t, zeros_like(p), p - sign(p)*t): NaN fails the comparison and takes the shift."),
            ("clamp_plus", (("dynamo-optimized", "dynopt"), ("torchscript", "ts")),
             "clamp(p - t, min=0) + clamp(p + t, max=0): Max/Min against 0 (dynamo), Clip with a bound left out "
             "(TorchScript, so inf maps to the largest float32)."),
            ("clamp_difference", (("torchscript", "ts"),),
             "clamp(p - t, min=0) - clamp(-p - t, min=0): a difference of ReLUs written as Clips."),
            ("sign_abs_mask", (("dynamo-optimized", "dynopt"),),
             "sign(p) * (|p| - t) * (|p| > t).float(): softshrink with a float mask, the shift as sign times "
             "magnitude.")))
    for exporter, suffix in (("dynamo-optimized", "dynopt"), ("torchscript", "ts")):
        cases.append(Case(fx(f"prox_const_clamp_f32_bias1_{suffix}.onnx"), prox_fn(),
                          prox_args("const", torch.float32, gen, shape=(1,)), exporter, "proximal_gd", [const],
                          "The update of a one-element parameter (Linear(d, 1).bias, shape [1]): var and delta "
                          "hold one element each, like the scalars.", outputs=["var_out"]))
    half = prox("var_out", "folded_reciprocal", "var", "delta", stored(LR, "float16"), stored(LR * L1, "float16"),
                stored(1 / stored(1 + LR * L2, "float16")))
    cases.append(Case(fx("prox_const_softshrink_f16_dynopt.onnx"), softshrink_user_fn("softshrink"),
                      prox_args("const", torch.float16, gen), "dynamo-optimized", "proximal_gd", [half],
                      "F.softshrink on a float16 p: compares |p| widened to float32 with t = 0.001 in float32 and "
                      "shifts by t rounded to float16 (0.0010004); no float16 lies between, so it is the shrink at "
                      "the rounded t.", dtype="float16", outputs=["var_out"]))
    for style, reduction, exporter, suffix, out, dout in (("fvcore", "mean", "dynamo", "dyn", "mul_4", "expand"),
                                                          ("mmdet", "sum", "dynamo-optimized", "dynopt",
                                                           "mul_5", "expand")):
        p, t = randn(4, 5, gen=gen), randn(4, 5, gen=gen)
        cases.append(Case(fx(f"sl1_autograd_{style}_{reduction}_b011_f32_{suffix}.onnx"),
                          autograd_hand_sl1(style, reduction, 0.11), {"p": p, "t": t}, exporter, "smooth_l1_grad",
                          [sl1(out, 0.11, reduction if suffix == "dyn" else "none", "p", "t", dout)],
                          f"torch.autograd.grad of a hand-written ({style}) SmoothL1 loss, {reduction}: the chain rule "
                          "sends the upstream gradient through Where(c, g, 0) and Where(c, 0, g) and adds the terms, "
                          "then multiplies by Sign(x) (a sum of selects; inf in x gives NaN there, flagged)."))
    cases.append(Case(fx("sl1_autograd_huber_none_d05_f32_dynopt.onnx"), autograd_huber_none_fn,
                      {"p": randn(4, 5, gen=gen), "t": randn(4, 5, gen=gen)}, "dynamo-optimized", "smooth_l1_grad",
                      [sl1("where_2", 0.5, "none", "p", "t", "expand", scale=0.5)],
                      "torch.autograd.grad of F.huber_loss(reduction='none', delta=0.5).sum(): the optimizer folds "
                      "+-delta * ones into full tensors beside the ones of the middle branch, "
                      "Where(x < -0.5, [-0.5...], Where(x > 0.5, [0.5...], x * [1...]))."))
    for exporter, suffix in (("dynamo", "dyn"), ("torchscript", "ts")):
        cases.append(Case(fx(f"sl1_hand_sign_clampmax_mean_b05_f32_{suffix}.onnx"), sign_clampmax_fn,
                          sl1_args("mean", torch.float32, gen), exporter, "smooth_l1_grad",
                          [sl1("grad", 0.5, "mean", "p", "t", "go")],
                          "sign(x) * torch.clamp(|x|/0.5, max=1) * go / numel: Clip(r, '', 1), the magnitude "
                          "capped at 1.", outputs=["grad"]))
    return cases


def autograd_row_target_sl1(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The gradient of a hand-written SmoothL1 loss against a per-row target, t[:, None]."""
    with torch.enable_grad():
        q = p.detach().requires_grad_(True)
        n = torch.abs(q - t[:, None])
        loss = torch.where(n < 0.11, 0.5 * n ** 2 / 0.11, n - 0.055).mean()
        return torch.autograd.grad(loss, q)[0]


def row_target_sl1_fn(go: torch.Tensor, p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    x = p - t[:, None]
    return torch.where(x.abs() < 0.5, x / 0.5, x.sign()) * go / x.numel()


def broadcast_label_and_tf_shrink_cases() -> list[Case]:
    """Labels that broadcast to predict's shape, and the proximal shrinks TensorFlow users write,
    as PyTorch users write them; own generator."""
    gen = torch.Generator().manual_seed(6206)
    shrinks = const_shrink_cases(gen, (
            ("min_residual", (("dynamo-optimized", "dynopt"), ("torchscript", "ts")),
             "p - sign(p) * torch.clamp(|p|, max=t): the shrink as the kernel computes it (Clip with max only)."),
            ("abs_minus_min", (("dynamo-optimized", "dynopt"),),
             "sign(p) * (|p| - torch.clamp(|p|, max=t)): max(|p| - t, 0) with the same rounding."),
            ("nested_where", (("dynamo-optimized", "dynopt"), ("torchscript", "ts")),
             "torch.where(p > t, p - t, torch.where(p < -t, p + t, p * 0)): two nested Wheres."),
            ("clamp_inf", (("torchscript", "ts"),),
             "sign(p) * torch.clamp(|p| - t, 0, inf): Clip with an inf max, which is Max(., 0).")))
    cases = [Case(fx("sl1_autograd_row_target_mean_b011_f32_dyn.onnx"), autograd_row_target_sl1,
                  {"p": randn(4, 5, gen=gen), "t": randn(4, gen=gen)}, "dynamo", "smooth_l1_grad",
                  [sl1("mul_4", 0.11, "mean", "p", "unsqueeze", "expand")],
                  "torch.autograd.grad of a hand-written SmoothL1 loss against a per-row target, n = |p - t[:, None]|: "
                  "the label [4, 1] broadcasts to p's [4, 5]; the fused node reads it as it is and the kernel "
                  "broadcasts it.")]
    for exporter, suffix, label in (("dynamo-optimized", "dynopt", "unsqueeze"),
                                    ("torchscript", "ts", "/Unsqueeze_output_0")):
        cases.append(Case(fx(f"sl1_hand_where_row_target_mean_b05_f32_{suffix}.onnx"), row_target_sl1_fn,
                          {"go": torch.tensor(1.5), "p": randn(6, 3, gen=gen), "t": randn(6, gen=gen)}, exporter,
                          "smooth_l1_grad", [sl1("grad", 0.5, "mean", "p", label, "go")],
                          "Where(|x| < 0.5, x/0.5, sign(x)) * go / numel with x = p - t[:, None]: a per-row target "
                          "[6, 1] broadcast to p's [6, 3].", outputs=["grad"]))
    return cases + shrinks


def function_fixture_cases() -> list[Case]:
    gen = torch.Generator().manual_seed(3205)
    args = {"x": randn(16, 8, gen=gen), "target": randn(16, 4, gen=gen), "W": randn(8, 4, scale=0.5, gen=gen),
            "lr": torch.tensor(0.1), "l1": torch.tensor(0.01), "l2": torch.tensor(0.05)}
    return [Case(str(FUNCTION_FIXTURES / "all_modules_as_functions_ts.onnx"), ModularNet(), args,
                 "torchscript", "mixed",
                 [], "every module a function, the top one too", opset=17, outputs=["W_new"],
                 ts_kwargs={"export_modules_as_functions": True})]


def entry_for(case: Case, model: onnx.ModelProto) -> dict:
    opset = {o.domain: o.version for o in model.opset_import}[""]
    entry = {"file": case.file, "exporter": case.exporter, "opset": opset, "family": case.family,
             "expected": case.expected, "attrs": case.attrs, "dtype": case.dtype, "dynamic": bool(case.dynamic),
             "inputs": input_specs(case, model), "notes": case.notes, "form": render_form(model),
             "size_bytes": len(model.SerializeToString())}
    if case.not_fused:
        entry["not_fused"] = case.not_fused
    return entry


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Mute stdout/stderr at the file-descriptor level: TorchScript prints its IR from C++ on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _run_quietly(action: Callable[[], object]) -> str:
    """Run an export that is expected to fail; return the exporter's own one-line reason."""
    try:
        with _silenced():
            action()
    except Exception as exc:  # noqa: BLE001 - any failure is the measurement
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        keys = ("No ONNX function", "not supported", "Cannot access", "NOT_IMPLEMENTED", "Error")
        reason = next((ln for ln in lines if any(k in ln for k in keys)), lines[0] if lines else "")
        return f"fails: {type(exc).__name__}: {reason[:220]}"
    return "succeeds with this torch version"


def _ort_session(model: onnx.ModelProto) -> object:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def exporter_limits() -> dict[str, list[str]]:
    """Export paths the fixtures would naturally use but that fail here, keyed by the fixture whose
    notes record it (that fixture is the workaround)."""
    gen = torch.Generator().manual_seed(1)
    mean_args = tuple(sl1_args("mean", torch.float32, gen).values())
    pair = (randn(4, 5, gen=gen), randn(4, 5, gen=gen))
    n = torch.export.Dim("n")
    bf16 = tuple(prox_args("const", torch.bfloat16, gen).values())
    probes = [
        ("sl1_hand_where_mean_b05_f32_ts.onnx", "TorchScript export of aten::smooth_l1_loss_backward",
         lambda: torch.onnx.export(Fn(aten_sl1("mean", 0.5)), mean_args, io.BytesIO(), dynamo=False)),
        ("sl1_hand_huber_none_d05_f32_ts.onnx", "TorchScript export of aten::huber_loss_backward",
         lambda: torch.onnx.export(Fn(aten_huber("mean", 0.5)), mean_args, io.BytesIO(), dynamo=False)),
        ("sl1_hand_where_mean_b05_f32_dynamic_dynopt.onnx",
         "dynamo export of aten.smooth_l1_loss_backward, reduction mean, dynamic dim 0",
         lambda: torch.onnx.export(Fn(aten_sl1("mean", 0.5)), mean_args, dynamo=True, verbose=False,
                                   dynamic_shapes=((None, {0: n}, {0: n}),))),
        ("sl1_autograd_mean_b05_f32_dynopt.onnx", "dynamo export of torch.func.grad(F.smooth_l1_loss)",
         lambda: torch.onnx.export(Fn(functorch_sl1), pair, dynamo=True, verbose=False)),
        ("sl1_autograd_mean_b05_f32_dynopt.onnx", "TorchScript export of torch.autograd.grad(F.smooth_l1_loss)",
         lambda: torch.onnx.export(Fn(autograd_sl1("mean", 0.5, False)), pair, io.BytesIO(), dynamo=False)),
        ("prox_const_clamp_bf16_cast_dynopt.onnx",
         "a bfloat16 proximal update without upcasts (dynamo export, then an onnxruntime CPU session)",
         lambda: _ort_session(torch.onnx.export(Fn(prox_fn()), bf16, dynamo=True, verbose=False).model_proto)),
    ]
    limits: dict[str, list[str]] = {}
    for target, label, action in probes:
        limits.setdefault(str(FIXTURES / target), []).append(
            f"Exporter limit measured: {label} {_run_quietly(action)}.")
    return limits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="export only files whose name contains this; manifest is not rewritten")
    parser.add_argument("--show", action="store_true", help="print each graph's form")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2024)
    cases = (sl1_cases(gen) + prox_cases(gen) + mixed_cases(gen) + sample_cases(gen)
             + user_code_spelling_cases() + sign_and_threshold_spelling_cases()
             + function_and_clamp_residual_cases() + repeated_expression_cases()
             + softshrink_and_autograd_cases() + broadcast_label_and_tf_shrink_cases())
    if opts.only:
        cases = [c for c in cases if opts.only in c.file]
    check_entry = load_checker()
    limits = {} if opts.only else exporter_limits()
    entries, rows = [], []
    for case in cases:
        model = export(case)
        onnx.checker.check_model(model)
        entry, worst = record(case.file, model, lambda m, case=case: entry_for(case, m), check_entry, limits, opts.show)
        entries.append(entry)
        rows.append((case.file, case.exporter, entry["opset"], entry["size_bytes"], worst, ops_histogram(model)))
    for case in function_fixture_cases():
        if opts.only and opts.only not in case.file:
            continue
        model = export(case)
        onnx.checker.check_model(model, full_check=True)
        (REPO / case.file).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(REPO / case.file))
        rows.append((case.file, case.exporter, case.opset, (REPO / case.file).stat().st_size, 0.0,
                     ops_histogram(model)))
    if limits:
        raise RuntimeError(f"exporter limits recorded for files that were not generated: {sorted(limits)}")
    if not opts.only:
        MANIFEST.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    width = max(len(r[0]) for r in rows)
    print(f"\n{'file':<{width}}  {'exporter':<16} opset  bytes   maxMARE  ops")
    for file, exporter, opset, size, worst, hist in rows:
        print(f"{file:<{width}}  {exporter:<16} {opset:>5} {size:>6}  {worst:8.2e}  {hist}")
    print(f"{len(rows)} models written and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
