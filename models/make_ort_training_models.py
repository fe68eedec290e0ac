"""Regenerate the onnxruntime-training fixtures in tests/fixtures/ort_training/ (with their manifest.json).

Every graph here is the training graph (training_model.onnx) that
onnxruntime.training.artifacts.generate_artifacts writes for a small PyTorch model whose loss is
torch's SmoothL1Loss / HuberLoss (or a hand-written variant), exported by torch.onnx.export
(dynamo); the backward in it is spelled by ORT's own gradient builder (Where gradients with zero
constants, ReduceMean's gradient as com.microsoft Scale by Size(x)/Size(dy), Abs's gradient as
Sign(x) * dy). The gradient w.r.t. a parameter feeds an InPlaceAccumulatorV2 and is no graph
output, so the manifest names the intermediate ("<value>_grad"). Only the training graph is kept
(the eval and optimizer graphs and the checkpoint are not). Each fixture is checked right after
generation with check_new_entry() of tests/lowering/new_exporter_check.py.

Needs onnxruntime-training 1.19.2 with numpy<2 and onnx 1.17.0, torch 2.13.0 and onnxscript (the
dynamo exporter), and ml_dtypes; the project is imported from this checkout, not installed.
Usage (in a separate environment: python -m venv /tmp/venv-ortt && /tmp/venv-ortt/bin/pip install
onnxruntime-training==1.19.2 "numpy<2" onnx==1.17.0 torch==2.13.0 onnxscript ml_dtypes):
/tmp/venv-ortt/bin/python models/make_ort_training_models.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F
from fixture_common import (
    keep_fusion_status,
    load_new_exporter_checker,
    ops_histogram,
    record_new_exporter_fixture,
    write_new_exporter_manifest,
)
from onnxruntime.training import artifacts

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/ort_training")
MANIFEST = REPO / FIXTURES / "manifest.json"

SL1 = "SmoothL1LossGradV2"
PROX = "ApplyProximalGradientDescent"
SHAPE = (4, 5)
OPSET = 18
TORCHSCRIPT_OPSET = 17
EXPORTER_VERSION = (f"onnxruntime-training {version('onnxruntime-training')}, torch {version('torch')} "
                    f"(torch.onnx.export dynamo, onnxscript {version('onnxscript')})")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}


class Regression(torch.nn.Module):
    """A parameter `pred` (the model's output itself) or a linear layer x @ W^T + b, and a loss."""

    def __init__(self, loss: Callable[..., torch.Tensor] | None, linear: bool, dtype: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.loss = loss
        self.linear = torch.nn.Linear(3, SHAPE[1]).to(TORCH_DTYPES[dtype]) if linear else None
        self.pred = None if linear else torch.nn.Parameter(torch.zeros(SHAPE, dtype=TORCH_DTYPES[dtype]))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.linear is not None:
            x, *rest = inputs
            return self.loss(self.linear(x), *rest) if self.loss else self.linear(x)
        return self.loss(self.pred, *inputs)


@dataclass
class Case:
    name: str
    loss: Callable[..., torch.Tensor] | None  # None: the model outputs its prediction (see ort_loss)
    source: str
    notes: str
    family: str = "smooth_l1_grad"
    sigma: float = 0.5
    reduction: str = "mean"
    scale: float = 1.0
    linear: bool = False
    weighted: bool = False         # loss(reduction="none") * w summed: dout is the input w
    near_miss: dict | None = None  # formula name and params of what the gradient computes instead
    dtype: str = "float32"
    ort_loss: str | None = None    # an artifacts.LossType added by generate_artifacts to the model's output
    torchscript: bool = False      # torch.onnx.export(dynamo=False) instead of the dynamo exporter
    inputs: dict[str, dict] = field(default_factory=dict)

    @property
    def file(self) -> str:
        return str(FIXTURES / f"{self.name}.onnx")


def sl1_loss(beta: float, reduction: str) -> Callable[..., torch.Tensor]:
    return lambda p, t: F.smooth_l1_loss(p, t, reduction=reduction, beta=beta)


def module_loss(module: torch.nn.Module) -> Callable[..., torch.Tensor]:
    return lambda p, t: module(p, t)


def huber_loss(delta: float, reduction: str) -> Callable[..., torch.Tensor]:
    return lambda p, t: F.huber_loss(p, t, reduction=reduction, delta=delta)


def weighted_sl1(beta: float) -> Callable[..., torch.Tensor]:
    return lambda p, t, w: (F.smooth_l1_loss(p, t, reduction="none", beta=beta) * w).sum()


def hand_sl1(beta: float, divisor: float | None = None) -> Callable[..., torch.Tensor]:
    """torch.where(|x| < beta, 0.5 x^2 / divisor, |x| - 0.5 beta).mean(); divisor defaults to beta."""
    def loss(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = p - t
        ax = x.abs()
        return torch.where(ax < beta, 0.5 * x * x / (divisor or beta), ax - 0.5 * beta).mean()
    return loss


def two_mask_sl1(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    x = p - t
    ax = x.abs()
    return ((ax < 0.5) * x * x + (ax > 0.5) * (ax - 0.25)).sum()


def cases() -> list[Case]:
    return [
        Case("sl1_functional_mean_b05_f32", sl1_loss(0.5, "mean"), "F.smooth_l1_loss(pred, target, beta=0.5)",
             "pred is the trainable parameter itself; its gradient pred_grad feeds the accumulator."),
        Case("sl1_module_sum_b1_f32", module_loss(torch.nn.SmoothL1Loss(reduction="sum", beta=1.0)),
             "torch.nn.SmoothL1Loss(reduction='sum', beta=1.0)(pred, target)", "beta 1 and a sum.",
             sigma=1.0, reduction="sum"),
        Case("sl1_linear_mean_b2_f32", module_loss(torch.nn.SmoothL1Loss(beta=2.0)),
             "torch.nn.SmoothL1Loss(beta=2.0)(torch.nn.Linear(3, 5)(x), target)",
             "A linear layer: the SmoothL1 gradient w.r.t. its output feeds the MatMul/ReduceSum gradients of "
             "weight and bias.", sigma=2.0, linear=True),
        Case("sl1_huber_mean_d1_f32", huber_loss(1.0, "mean"), "F.huber_loss(pred, target, delta=1.0)",
             "Huber delta 1: the same gradient as SmoothL1 beta 1.", sigma=1.0),
        Case("sl1_huber_module_sum_d05_f32", module_loss(torch.nn.HuberLoss(reduction="sum", delta=0.5)),
             "torch.nn.HuberLoss(reduction='sum', delta=0.5)(pred, target)",
             "Huber gradient = delta * SmoothL1 gradient with sigma = delta: scale 0.5.",
             sigma=0.5, reduction="sum", scale=0.5),
        Case("sl1_weighted_none_b05_f32", weighted_sl1(0.5), "(F.smooth_l1_loss(pred, target, reduction='none', "
             "beta=0.5) * w).sum()", "Per-element weights: the unreduced gradient with dout = w.",
             reduction="none", weighted=True),
        Case("sl1_hand_where_mean_b05_f32", hand_sl1(0.5),
             "torch.where(|x| < 0.5, 0.5*x**2/0.5, |x| - 0.25).mean(), x = pred - target",
             "Written by hand in torch."),
        Case("sl1_hand_where_mean_b05_ts_f32", hand_sl1(0.5),
             "torch.where(|x| < 0.5, 0.5*x**2/0.5, |x| - 0.25).mean(), x = pred - target; TorchScript exporter",
             "torch.onnx.export(dynamo=False, opset 17), the exporter older ORT-training examples use. Exporter "
             "limit measured: F.smooth_l1_loss through the TorchScript exporter fails: "
             "UnsupportedOperatorError (aten::smooth_l1_loss at opset 17).", torchscript=True),
        Case("sl1_ort_l1loss_linear_f32", None,
             "generate_artifacts(torch.nn.Linear(3, 5) exported, loss=artifacts.LossType.L1Loss): "
             "mean(|pred - target|)",
             "ORT's own L1Loss block; Abs's gradient is Sign(x) * dy, so the gradient is SmoothL1's with sigma 0 "
             "exactly (sign(0) = 0). ORT names the target input 'target'.", sigma=0.0, linear=True,
             ort_loss="L1Loss"),
        Case("nm_sl1_changed_constant_mean_f32", hand_sl1(0.5, divisor=0.4),
             "torch.where(|x| < 0.5, 0.5*x**2/0.4, |x| - 0.25).mean(), x = pred - target",
             "Near miss: the quadratic divides by 0.4, the branch switches at 0.5.", family="near_miss",
             near_miss={"formula": "select_grad", "params": {"reduction": "mean", "threshold": 0.5,
                                                             "inner_slope": 2.5, "outer": 1.0}}),
        Case("nm_sl1_two_masks_tie_sum_f32", two_mask_sl1,
             "((|x| < 0.5) * x**2 + (|x| > 0.5) * (|x| - 0.25)).sum(), x = pred - target",
             "Near miss: at |x| == 0.5 neither mask holds; gradient 0 there instead of +-1.", family="near_miss",
             reduction="sum", near_miss={"formula": "two_mask_grad", "params": {"reduction": "sum", "sigma": 0.5}}),
    ]


# ----------------------------------------------------------------------------------------------

def forward_model(case: Case) -> onnx.ModelProto:
    module = Regression(case.loss, case.linear, case.dtype)
    dt = TORCH_DTYPES[case.dtype]
    args = [torch.zeros(SHAPE[0], 3, dtype=dt)] if case.linear else []
    names = ["x"] if case.linear else []
    if not case.ort_loss:
        args.append(torch.zeros(SHAPE, dtype=dt))
        names.append("target")
    if case.weighted:
        args.append(torch.zeros(SHAPE, dtype=dt))
        names.append("w")
    output = "pred" if case.ort_loss else "loss"
    if case.torchscript:
        buffer = io.BytesIO()
        torch.onnx.export(module, tuple(args), buffer, input_names=names, output_names=[output], dynamo=False,
                          opset_version=TORCHSCRIPT_OPSET, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
        return onnx.load_from_string(buffer.getvalue())
    with contextlib.redirect_stdout(io.StringIO()):
        program = torch.onnx.export(module, tuple(args), input_names=names, output_names=[output], dynamo=True,
                                    opset_version=OPSET, verbose=False)
    return program.model_proto


def training_graph(case: Case) -> tuple[onnx.ModelProto, list[str]]:
    forward = forward_model(case)
    params = [i.name for i in forward.graph.initializer
              if i.name in ("pred", "linear.weight", "linear.bias", "weight", "bias")]
    loss = getattr(artifacts.LossType, case.ort_loss) if case.ort_loss else None
    with tempfile.TemporaryDirectory() as folder:
        artifacts.generate_artifacts(forward, requires_grad=params, loss=loss, optimizer=None,
                                     artifact_directory=folder)
        model = onnx.load(os.path.join(folder, "training_model.onnx"))
    return model, params


def predict_value(model: onnx.ModelProto) -> str:
    """The forward value the loss differences against the target (the linear layer's output or pred):
    the other operand of the first Sub that reads the target, through the Identity nodes the
    TorchScript export leaves on a parameter."""
    sub = next(n for n in model.graph.node if n.op_type == "Sub" and "target" in n.input)
    value = next(i for i in sub.input if i != "target")
    producer = {o: n for n in model.graph.node for o in n.output}
    while value in producer and producer[value].op_type == "Identity":
        value = producer[value].input[0]
    return value


def half_precision_limit(loss: Callable[..., torch.Tensor]) -> str:
    """What generate_artifacts says to a model with a float16 parameter pred and target."""
    forward = forward_model(Case("half", loss, "", "", dtype="float16"))
    with tempfile.TemporaryDirectory() as folder:
        try:
            artifacts.generate_artifacts(forward, requires_grad=["pred"], loss=None, optimizer=None,
                                         artifact_directory=folder)
        except RuntimeError as exc:
            # the message after ORT's status prefix, or after the C++ signature it starts with
            line = str(exc).strip().splitlines()[-1]
            line = line.split("FAIL : ", 1)[1] if "FAIL : " in line else line.rsplit(") ", 1)[-1]
            return f"fails: {line[:200].rstrip('.')}"
    return "succeeds"


def entry_for(case: Case, model: onnx.ModelProto, params: list[str]) -> dict:
    opset = {o.domain: o.version for o in model.opset_import}[""]
    predict = predict_value(model)
    inputs: dict[str, dict] = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "lazy_reset_grad":
            inputs[vi.name] = {"shape": shape, "dtype": "bool", "value": True}
        else:
            inputs[vi.name] = {"shape": shape, "dtype": case.dtype}
    dout = "w" if case.weighted else 1.0
    inst = {"op": SL1, "sigma": case.sigma, "reduction": case.reduction, "scale": case.scale,
            "inputs": {"predict": predict, "label": "target", "dout": dout}, "output": f"{predict}_grad"}
    entry = {"exporter": "onnxruntime-training", "exporter_version": EXPORTER_VERSION, "opset": opset,
             "family": case.family, "source": case.source,
             "expected": {SL1: 0 if case.near_miss else 1, PROX: 0}, "attrs": [] if case.near_miss else [inst],
             "dtype": case.dtype, "dynamic": False, "inputs": inputs,
             "notes": f"{case.notes} Trainable: {', '.join(params)}."}
    if case.near_miss:
        entry["near_misses"] = [{"output": inst["output"], "formula": case.near_miss["formula"],
                                 "inputs": dict(inst["inputs"]), "params": case.near_miss["params"],
                                 "resembles": inst}]
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="generate only the cases whose name contains this")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    checker = load_new_exporter_checker()
    limits = {"sl1_functional_mean_b05_f32": [
        "Exporter limit measured: the same model with a float16 parameter and target (torch's decomposition "
        "computes the loss in float32 and the dynamo exporter's optimizer folds Cast(pred) into a float32 "
        f"constant): generate_artifacts(requires_grad=['pred']) {half_precision_limit(sl1_loss(0.5, 'mean'))}."],
        "sl1_hand_where_mean_b05_f32": [
            "Exporter limit measured: the same loss on float16 pred and target (computed in float16): "
            f"generate_artifacts {half_precision_limit(hand_sl1(0.5))}."]} if not opts.only else {}
    old = {e["file"]: e for e in json.loads(MANIFEST.read_text(encoding="utf-8"))} if MANIFEST.exists() else {}
    entries, rows = [], []
    for case in cases():
        if opts.only not in case.name:
            if case.file in old:
                entries.append(old[case.file])
            continue
        model, params = training_graph(case)
        entry = entry_for(case, model, params)
        entry["notes"] = " ".join([entry["notes"], *limits.pop(case.name, [])])
        entry = record_new_exporter_fixture(case.file, model, entry, checker)
        keep_fusion_status(entry, old.get(case.file))
        entries.append(entry)
        rows.append((case.name, entry["size_bytes"], ops_histogram(model)))
    if limits:
        raise RuntimeError(f"exporter limits recorded for fixtures that were not generated: {sorted(limits)}")
    write_new_exporter_manifest(MANIFEST, FIXTURES, entries, rows, prune=not opts.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
