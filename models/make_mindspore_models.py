"""Regenerate the MindSpore fixtures in tests/fixtures/mindspore/ (with their manifest.json).

MindSpore's own ONNX exporter cannot write a SmoothL1 backward: with mindspore 2.10.0,
mindspore.export(..., file_format="ONNX") of the gradient of nn.SmoothL1Loss stops at its
SmoothL1LossGrad primitive, and of a loss written with ops.select at the ZerosLikeExt its autodiff
emits (both errors are measured on every run and recorded in the manifest's notes). So the
fixtures are built with onnx.helper from MindSpore's own backward, op for op:

  * the where/select/sign backward: the graph MindSpore's autodiff (GradOperation with a sens
    input) makes of a SmoothL1 loss written with ops.abs and ops.select, read from the IR that
    MindSpore dumps after its validate pass (context save_graphs), each primitive written as the
    ONNX op that computes it (Select as Where, ZerosLikeExt as ConstantOfShape of the Shape, AddN
    as Sum, Divs/Muls/LessScalar against a constant);
  * nn.SmoothL1Loss: its bprop (REG_BPROP_BUILDER("SmoothL1Loss") in
    mindspore/ccsrc/frontend/expander/bprop/grad_ops/grad_nn_ops.cc) emits the SmoothL1LossGrad
    primitive, written here as that primitive's CPU kernel computes it
    (mindspore/ccsrc/plugin/device/cpu/kernel/smooth_l1_loss_grad_cpu_kernel.cc, MindSpore 2.x:
    diff > beta gives dloss, diff < -beta gives -dloss, else (diff / beta) * dloss, each times
    1/n for reduction mean).

Every fixture is run by onnxruntime against MindSpore itself (the gradient the installed MindSpore
computes on the same inputs) before the usual check against the float64 reference.

Needs mindspore (2.10.0, CPU), onnx, onnxruntime and pytest (the checker module imports it); CI has
none of them, so the .onnx files and the manifest are committed.
Usage (in a separate environment: python -m venv msenv && msenv/bin/pip install mindspore==2.10.0
onnx onnxruntime pytest): msenv/bin/python models/make_mindspore_models.py
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import mindspore as ms
import numpy as np
import onnx
import onnxruntime as ort
from fixture_common import load_checker, ops_histogram, record, render_form
from mindspore import nn, ops
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/mindspore")
MANIFEST = REPO / FIXTURES / "manifest.json"
SL1 = "SmoothL1LossGradV2"
SHAPE = (4, 5)
OPSET = 17
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # MindSpore's Reduction enum, as the IR prints it


class SelectLoss(nn.Cell):
    """SmoothL1 written by hand with ops.select, as MindSpore users write a loss of their own."""

    def __init__(self, beta: float, reduction: str) -> None:
        super().__init__()
        self.beta, self.reduce = beta, ops.mean if reduction == "mean" else ops.sum

    def construct(self, p: ms.Tensor, t: ms.Tensor) -> ms.Tensor:
        x = p - t
        ax = ops.abs(x)
        return self.reduce(ops.select(ax < self.beta, 0.5 * x * x / self.beta, ax - 0.5 * self.beta))


class WithSens(nn.Cell):
    """The gradient w.r.t. p pulled back from the cotangent dout (GradOperation's sens input)."""

    def __init__(self, net: nn.Cell) -> None:
        super().__init__()
        self.net, self.grad = net, ops.GradOperation(sens_param=True)

    def construct(self, p: ms.Tensor, t: ms.Tensor, dout: ms.Tensor) -> ms.Tensor:
        return self.grad(self.net)(p, t, dout)


@dataclass
class Case:
    name: str
    loss: Callable[[], nn.Cell]
    attrs: list[dict]
    notes: str

    @property
    def file(self) -> str:
        return str(FIXTURES / f"{self.name}.onnx")


def sl1(sigma: float, reduction: str) -> dict:
    return {"op": SL1, "sigma": sigma, "reduction": reduction, "scale": 1.0,
            "inputs": {"predict": "p", "label": "t", "dout": "dout"}, "output": "grad"}


# ----------------------------------------------------------------------------------------------
# MindSpore's backward graph, as its IR dump prints it.

_LINE = re.compile(r"^\s+%(\d+)\([^)]*\) = (?:PrimFunc_)?(\w+)\((.*?)\)(?: primitive_attrs| cnode_attrs|$)")
_ARG = re.compile(r"%para\d+_(\w+)|%(\d+)|F32\(([^)]+)\)|\(((?:I64\(-?\d+\)(?:, )?)+)\)|I64\(([^)]+)\)|None|"
                  r"Tensor\(shape=\[\], dtype=Float32, value=([^)]+)\)")


def backward_ir(net: nn.Cell, args: list[ms.Tensor]) -> list[tuple[int, str, list[object]]]:
    """(k, primitive, arguments) of every node of the graph MindSpore runs for `net`, read from the
    IR it dumps after its validate pass: arguments are input names, earlier node numbers (int),
    float constants, integer tuples, or None."""
    with tempfile.TemporaryDirectory() as tmp:
        ms.set_context(save_graphs=2, save_graphs_path=tmp)
        try:
            net(*args)
        finally:
            ms.set_context(save_graphs=0)
        dump, = Path(tmp).glob("*_validate_*.ir")
        lines = dump.read_text(encoding="utf-8").splitlines()
    nodes = []
    for line in lines:
        found = _LINE.match(line)
        if found is None:
            continue
        k, prim, text = int(found[1]), found[2], found[3]
        parsed: list[object] = []
        for arg in _ARG.finditer(text):
            name, ref, f32, tup, i64, scalar = arg.groups()
            if name is not None:
                parsed.append(name)
            elif ref is not None:
                parsed.append(int(ref))
            elif f32 is not None or scalar is not None:
                parsed.append(float(f32 if f32 is not None else scalar))
            elif i64 is not None:
                parsed.append(int(i64))
            elif tup is not None:
                parsed.append(tuple(int(v) for v in re.findall(r"I64\((-?\d+)\)", tup)))
            else:
                parsed.append(None)
        nodes.append((k, prim, parsed))
    if not nodes:
        raise RuntimeError("no nodes found in MindSpore's IR dump")
    return nodes


class Builder:
    """ONNX nodes and constants for the translation of one backward graph."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, value: object, dtype: type = np.float32) -> str:
        name = f"const_{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        out = out or f"{op_type.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{op_type}_{len(self.nodes)}", **attrs))
        return out


def translate(nodes: list[tuple[int, str, list[object]]], output: str) -> onnx.GraphProto:
    """MindSpore's primitives as ONNX ops; the last node's value is the graph output."""
    b = Builder()
    value: dict[int, str] = {}
    tuples: dict[int, list[str]] = {}

    def ref(arg: object) -> str:
        return value[arg] if isinstance(arg, int) else str(arg)

    last = nodes[-1][0]
    for k, prim, args in nodes:
        out = output if k == last else None
        if prim == "MakeTuple":
            tuples[k] = [ref(a) for a in args]
            continue
        if prim in ("Sub", "Mul", "Select", "RealDiv") and all(isinstance(a, (int, str)) for a in args):
            onnx_op = {"Sub": "Sub", "Mul": "Mul", "Select": "Where", "RealDiv": "Div"}[prim]
            value[k] = b.op(onnx_op, [ref(a) for a in args], out)
        elif prim == "RealDiv" and isinstance(args[1], float):
            value[k] = b.op("Div", [ref(args[0]), b.const(args[1])], out)
        elif prim in ("Abs", "Sign"):
            value[k] = b.op(prim, [ref(args[0])], out)
        elif prim in ("Divs", "Muls", "LessScalar"):
            onnx_op = {"Divs": "Div", "Muls": "Mul", "LessScalar": "Less"}[prim]
            value[k] = b.op(onnx_op, [ref(args[0]), b.const(args[1])], out)
        elif prim == "Reshape":
            value[k] = b.op("Reshape", [ref(args[0]), b.const(args[1], np.int64)], out)
        elif prim == "Tile":
            value[k] = b.op("Tile", [ref(args[0]), b.const(args[1], np.int64)], out)
        elif prim == "ZerosLikeExt":
            value[k] = b.op("ConstantOfShape", [b.op("Shape", [ref(args[0])])], out,
                            value=numpy_helper.from_array(np.zeros(1, np.float32)))
        elif prim == "AddN":
            value[k] = b.op("Sum", tuples[args[0]], out)
        elif prim == "SmoothL1LossGrad":
            value[k] = _smooth_l1_loss_grad_kernel(b, *[ref(a) for a in args[:3]], beta=args[3],
                                                   reduction=REDUCTIONS[args[4]], out=out)
        else:
            raise NotImplementedError(f"no translation of MindSpore's {prim}{tuple(args)}")
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in ("p", "t")]
    inputs.append(helper.make_tensor_value_info("dout", TensorProto.FLOAT, []))
    return helper.make_graph(b.nodes, "mindspore_backward", inputs,
                             [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(SHAPE))], b.inits)


def _smooth_l1_loss_grad_kernel(b: Builder, predict: str, target: str, dloss: str, beta: float, reduction: str,
                                out: str | None) -> str:
    """SmoothL1LossGrad as smooth_l1_loss_grad_cpu_kernel.cc computes it, element by element:
    diff > beta: dloss; diff < -beta: -dloss; else (diff / beta) * dloss; times val = 1/n for mean."""
    diff = b.op("Sub", [predict, target])
    beta_c = b.const(beta)
    val = b.const(1.0 / int(np.prod(SHAPE))) if reduction == "mean" else None

    def scaled(v: str) -> str:
        return v if val is None else b.op("Mul", [v, val])

    high = scaled(dloss)
    low = scaled(b.op("Neg", [dloss]))
    middle = scaled(b.op("Mul", [b.op("Div", [diff, beta_c]), dloss]))
    inner = b.op("Where", [b.op("Less", [diff, b.const(-beta)]), low, middle])
    return b.op("Where", [b.op("Greater", [diff, beta_c]), high, inner], out)


# ----------------------------------------------------------------------------------------------

def onnx_export_failure(net: nn.Cell, args: list[ms.Tensor]) -> str:
    """What mindspore.export(..., file_format="ONNX") says of the gradient graph."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ms.export(net, *args, file_name=str(Path(tmp) / "grad"), file_format="ONNX")
        except Exception as exc:  # noqa: BLE001 - the failure is the measurement
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
            return f"fails: {type(exc).__name__}: {first.rstrip('.')}"
    return "succeeds with this MindSpore version"


def check_against_mindspore(model: onnx.ModelProto, net: nn.Cell, rng: np.random.Generator) -> float:
    """The largest relative difference between onnxruntime on the fixture and MindSpore on the same
    inputs (beta's edges included); raises above float32's rounding."""
    p = rng.standard_normal(SHAPE).astype(np.float32)
    t = rng.standard_normal(SHAPE).astype(np.float32)
    p.reshape(-1)[:4] = t.reshape(-1)[:4] + np.array([0.0, 0.5, -0.5, 1e-3], np.float32)
    dout = np.array(1.5, np.float32)
    want = net(ms.Tensor(p), ms.Tensor(t), ms.Tensor(dout))
    want = (want[0] if isinstance(want, tuple) else want).asnumpy()
    got, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"p": p, "t": t, "dout": dout})
    worst = float(np.max(np.abs(got - want) / (np.abs(want) + 1e-7)))
    if worst > 1e-6:
        raise AssertionError(f"the translation differs from MindSpore by {worst:.3g}")
    return worst


def cases() -> list[Case]:
    select_form = ("Sum(Mul(Where(c, 0, g), Sign(x)), Mul(Mul(x, Div(Where(c, g, 0), 0.5)), 0.5), "
                   "Mul(Mul(x, 0.5), Div(Where(c, g, 0), 0.5))), c = Less(Abs(x), 0.5), x = Sub(p, t), "
                   "0 = ConstantOfShape(Shape(g))")
    return [
        Case("sl1_select_sign_mean_b05_f32", lambda: SelectLoss(0.5, "mean"), [sl1(0.5, "mean")],
             "MindSpore's autodiff of mean(ops.select(|x| < 0.5, 0.5*x*x/0.5, |x| - 0.25)), x = p - t, pulled back "
             f"from dout: {select_form}, g = RealDiv(Tile(Reshape(dout, (1, 1)), (4, 5)), 20). Select's bprop "
             "selects against ZerosLike both ways, Abs's multiplies by Sign, the square's two operands give two "
             "terms, and AddN sums the three."),
        Case("sl1_select_sign_sum_b1_f32", lambda: SelectLoss(1.0, "sum"), [sl1(1.0, "sum")],
             "As sl1_select_sign_mean_b05_f32 with beta 1 and a sum: g = Tile(Reshape(dout, (1, 1)), (4, 5)), "
             "the constants 1 and 0.5 in place of 0.5 and 0.25."),
        Case("sl1_kernel_mean_b05_f32", lambda: nn.SmoothL1Loss(beta=0.5, reduction="mean"), [sl1(0.5, "mean")],
             "nn.SmoothL1Loss(beta=0.5, reduction='mean'): its bprop is the one SmoothL1LossGrad primitive, written "
             "as MindSpore's CPU kernel computes it: Where(Greater(d, 0.5), Mul(dout, 1/20), Where(Less(d, -0.5), "
             "Mul(Neg(dout), 1/20), Mul(Mul(Div(d, 0.5), dout), 1/20))), d = Sub(p, t)."),
    ]


def entry_for(case: Case, model: onnx.ModelProto, limit: str) -> dict:
    inputs = {"p": {"shape": list(SHAPE), "dtype": "float32"}, "t": {"shape": list(SHAPE), "dtype": "float32"},
              "dout": {"shape": [], "dtype": "float32", "range": [0.5, 2.0]}}
    return {"file": case.file, "exporter": "mindspore",
            "exporter_version": f"mindspore {version('mindspore')}: its backward graph, written with onnx.helper",
            "opset": OPSET, "family": "smooth_l1_grad", "expected": {SL1: 1, "ApplyProximalGradientDescent": 0},
            "attrs": case.attrs, "dtype": "float32", "dynamic": False, "inputs": inputs,
            "notes": f"{case.notes} Exporter limit measured: mindspore.export(..., file_format='ONNX') of this "
                     f"gradient {limit}.",
            "form": render_form(model), "size_bytes": len(model.SerializeToString())}


def main() -> int:
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    check_entry = load_checker()
    rng = np.random.default_rng(26)
    entries, rows = [], []
    for case in cases():
        net = WithSens(case.loss())
        args = [ms.Tensor(np.ones(SHAPE, np.float32)), ms.Tensor(np.zeros(SHAPE, np.float32)),
                ms.Tensor(np.float32(1.0))]
        limit = onnx_export_failure(net, args)
        graph = translate(backward_ir(net, args), "grad")
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="models/make_mindspore_models.py")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        worst_ms = check_against_mindspore(model, net, rng)
        entry, worst = record(case.file, model, lambda m, c=case, lim=limit: entry_for(c, m, lim), check_entry, {},
                              show=False)
        entries.append(entry)
        rows.append((case.name, entry["size_bytes"], worst_ms, worst, ops_histogram(model)))
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    for name, size, worst_ms, worst, hist in rows:
        print(f"{name:<32} {size:>6}  vs MindSpore {worst_ms:.2e}  vs float64 {worst:.2e}  {hist}")
    print(f"{len(rows)} models written to {FIXTURES} and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
