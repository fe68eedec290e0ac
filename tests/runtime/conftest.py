"""Model builders for the runtime tests: unfused subgraphs and hand-built fused models.

The hand-built fused models follow the contract of contracts/fused_ops.py and the layout of a
fused model (custom node in com.huawei.ascend plus a model-local function holding the matched
subgraph), so the runtime is tested independently of the graph pass.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from app.diff_cli import add_input_options
from contracts.fused_ops import DOMAIN, PROXIMAL_GD, SMOOTH_L1_GRAD

OPSET = 17


def _cast_in(nodes: list, names: list[str], wrap: bool) -> list[str]:
    if not wrap:
        return names
    out = []
    for n in names:
        nodes.append(h.make_node("Cast", [n], [n + "_f"], to=T.FLOAT))
        out.append(n + "_f")
    return out


def smooth_l1_body(beta: float, reduction: str, numel: int, dtype: int, out: str = "out",
                   inputs: tuple[str, str, str] = ("predict", "label", "dout")
                   ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """PyTorch's decomposition: Where(|x| < beta, g*x/beta, g*sign(x)), g = norm*dout.

    float16/bfloat16 are computed in float32 between Casts (what exporters emit for them).
    """
    wrap = dtype != T.FLOAT
    nodes: list[onnx.NodeProto] = []
    p, lab, d = _cast_in(nodes, list(inputs), wrap)
    inits = [h.make_tensor("beta", T.FLOAT, [], [beta])]
    g = d
    if reduction == "mean":
        inits.append(h.make_tensor("norm", T.FLOAT, [], [1.0 / numel]))
        nodes.append(h.make_node("Mul", [d, "norm"], ["g"]))
        g = "g"
    res = out + "_f" if wrap else out
    nodes += [h.make_node("Sub", [p, lab], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
              h.make_node("Less", ["ax", "beta"], ["c"]), h.make_node("Mul", [g, "x"], ["gx"]),
              h.make_node("Div", ["gx", "beta"], ["a"]), h.make_node("Sign", ["x"], ["sx"]),
              h.make_node("Mul", [g, "sx"], ["b"]), h.make_node("Where", ["c", "a", "b"], [res])]
    if wrap:
        nodes.append(h.make_node("Cast", [res], [out], to=dtype))
    return nodes, inits


def smooth_l1_model(shape: tuple[int, ...] = (4, 300), dtype: int = T.FLOAT, beta: float = 1.0,
                    reduction: str = "mean", scalar_dout: bool = False,
                    dynamic: bool = False) -> onnx.ModelProto:
    numel = int(np.prod(shape))
    nodes, inits = smooth_l1_body(beta, reduction, numel, dtype)
    dims: list = ["batch", *shape[1:]] if dynamic else list(shape)
    graph = h.make_graph(nodes, "smooth_l1_grad", [
        h.make_tensor_value_info("predict", dtype, dims), h.make_tensor_value_info("label", dtype, dims),
        h.make_tensor_value_info("dout", dtype, [] if scalar_dout else dims)],
        [h.make_tensor_value_info("out", dtype, dims)], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


def prox_body(out: str = "out") -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """TensorFlow's formula: sign(p) * relu(|p| - alpha*l1) / (1 + alpha*l2), p = var - alpha*delta."""
    nodes = [h.make_node("Mul", ["delta", "alpha"], ["ad"]), h.make_node("Sub", ["var", "ad"], ["prox"]),
             h.make_node("Abs", ["prox"], ["ap"]), h.make_node("Mul", ["alpha", "l1"], ["t"]),
             h.make_node("Sub", ["ap", "t"], ["apt"]), h.make_node("Relu", ["apt"], ["m"]),
             h.make_node("Sign", ["prox"], ["sp"]), h.make_node("Mul", ["sp", "m"], ["num"]),
             h.make_node("Mul", ["alpha", "l2"], ["al2"]), h.make_node("Add", ["one", "al2"], ["den"]),
             h.make_node("Div", ["num", "den"], [out])]
    return nodes, [h.make_tensor("one", T.FLOAT, [], [1.0])]


def prox_model(shape: tuple[int, ...] = (1000,), runtime_scalars: bool = True,
               scalars: tuple[float, float, float] = (0.1, 0.05, 0.2)) -> onnx.ModelProto:
    nodes, inits = prox_body()
    ins = [h.make_tensor_value_info("var", T.FLOAT, list(shape)),
           h.make_tensor_value_info("delta", T.FLOAT, list(shape))]
    if runtime_scalars:
        ins += [h.make_tensor_value_info(n, T.FLOAT, []) for n in ("alpha", "l1", "l2")]
    else:
        inits += [h.make_tensor(n, T.FLOAT, [], [v]) for n, v in zip(("alpha", "l1", "l2"), scalars)]
    graph = h.make_graph(nodes, "prox", ins, [h.make_tensor_value_info("out", T.FLOAT, list(shape))],
                         initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


def fused_smooth_l1_model(shape: tuple[int, ...] = (4, 300), dtype: int = T.FLOAT, beta: float = 1.0,
                          reduction: str = "mean", node_sigma: float | None = None,
                          node_name: str = "SmoothL1LossGradV2_0") -> onnx.ModelProto:
    """A fused model by hand: one SmoothL1LossGradV2 node whose function body is the subgraph.

    node_sigma differs from beta to make a deliberately broken fused node.
    """
    numel = int(np.prod(shape))
    body, inits = smooth_l1_body(beta, reduction, numel, dtype, out="gradient",
                                 inputs=("predict", "label", "dout"))
    const_nodes = [h.make_node("Constant", [], [t.name], value=t) for t in inits]
    fn = h.make_function(DOMAIN, SMOOTH_L1_GRAD, ["predict", "label", "dout"], ["gradient"],
                         const_nodes + body, [h.make_opsetid("", OPSET)], overload="n0")
    node = h.make_node(SMOOTH_L1_GRAD, ["p", "l", "d"], ["out"], domain=DOMAIN, name=node_name,
                       sigma=float(beta if node_sigma is None else node_sigma), reduction=reduction, scale=1.0)
    node.overload = "n0"
    graph = h.make_graph([node], "fused", [h.make_tensor_value_info(n, dtype, list(shape)) for n in "pld"],
                         [h.make_tensor_value_info("out", dtype, list(shape))])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET), h.make_opsetid(DOMAIN, 1)],
                        functions=[fn])


def unfused_for_hand_fused(shape: tuple[int, ...] = (4, 300), dtype: int = T.FLOAT, beta: float = 1.0,
                           reduction: str = "mean") -> onnx.ModelProto:
    """The unfused model matching fused_smooth_l1_model (inputs p, l, d)."""
    numel = int(np.prod(shape))
    nodes, inits = smooth_l1_body(beta, reduction, numel, dtype, inputs=("p", "l", "d"))
    graph = h.make_graph(nodes, "unfused", [h.make_tensor_value_info(n, dtype, list(shape)) for n in "pld"],
                         [h.make_tensor_value_info("out", dtype, list(shape))], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


def fused_prox_model(shape: tuple[int, ...] = (1000,)) -> onnx.ModelProto:
    """A fused ApplyProximalGradientDescent with runtime scalars and a function body."""
    body, inits = prox_body(out="var_out")
    const_nodes = [h.make_node("Constant", [], [t.name], value=t) for t in inits]
    fn = h.make_function(DOMAIN, PROXIMAL_GD, ["var", "alpha", "l1", "l2", "delta"], ["var_out"],
                         const_nodes + body, [h.make_opsetid("", OPSET)], overload="p0")
    node = h.make_node(PROXIMAL_GD, ["var", "alpha", "l1", "l2", "delta"], ["out"], domain=DOMAIN,
                       name="ApplyProximalGradientDescent_0", scalar_form="raw")
    node.overload = "p0"
    ins = [h.make_tensor_value_info(n, T.FLOAT, list(shape)) for n in ("var", "delta")]
    ins += [h.make_tensor_value_info(n, T.FLOAT, []) for n in ("alpha", "l1", "l2")]
    graph = h.make_graph([node], "fused", ins, [h.make_tensor_value_info("out", T.FLOAT, list(shape))])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET), h.make_opsetid(DOMAIN, 1)],
                        functions=[fn])


def prox_chain_model(count: int, shape: tuple[int, ...] = (64,), parallel: bool = False) -> onnx.ModelProto:
    """`count` proximal updates, each with its own constants (so each fused node gets its own
    function) and a standard Neg after it. In a row by default: update i+1 reads the Neg of
    update i, so the fused model alternates fused nodes and standard nodes. `parallel`: every
    update reads its own Neg of the input var and ends in its own graph output."""
    nodes, inits, outputs = [], [], []
    var = "var"
    for i in range(count):
        if parallel:
            var = f"pre{i}"
            nodes.append(h.make_node("Neg", ["var"], [var]))
        body, _ = prox_body(out=f"upd{i}")
        rename = {n: f"{n}{i}" for n in ("ad", "prox", "ap", "t", "apt", "m", "sp", "num", "al2", "den",
                                         "one", "alpha", "l1", "l2")}
        rename["var"] = var
        for node in body:
            node.input[:] = [rename.get(x, x) for x in node.input]
            node.output[:] = [rename.get(x, x) for x in node.output]
        inits += [h.make_tensor(f"one{i}", T.FLOAT, [], [1.0]),
                  h.make_tensor(f"alpha{i}", T.FLOAT, [], [0.1 + 0.001 * i]),
                  h.make_tensor(f"l1{i}", T.FLOAT, [], [0.05]), h.make_tensor(f"l2{i}", T.FLOAT, [], [0.2])]
        nodes += body
        var = f"next{i}"
        nodes.append(h.make_node("Neg", [f"upd{i}"], [var]))
        if parallel:
            outputs.append(var)
    outputs = outputs or [var]
    ins = [h.make_tensor_value_info(n, T.FLOAT, list(shape)) for n in ("var", "delta")]
    graph = h.make_graph(nodes, "prox_chain", ins,
                         [h.make_tensor_value_info(o, T.FLOAT, list(shape)) for o in outputs], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


class Builders:
    smooth_l1_model = staticmethod(smooth_l1_model)
    prox_model = staticmethod(prox_model)
    fused_smooth_l1_model = staticmethod(fused_smooth_l1_model)
    unfused_for_hand_fused = staticmethod(unfused_for_hand_fused)
    fused_prox_model = staticmethod(fused_prox_model)
    prox_chain_model = staticmethod(prox_chain_model)


@pytest.fixture
def build() -> type[Builders]:
    return Builders


@pytest.fixture
def diff_args():
    """Parse diff options exactly as the CLI would."""
    def parse(*argv: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_input_options(parser)
        return parser.parse_args(list(argv))
    return parse
