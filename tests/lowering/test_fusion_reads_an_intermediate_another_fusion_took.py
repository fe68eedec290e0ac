"""A fused node whose input is an intermediate an earlier fusion took: the earlier fusion keeps
that node for its outside readers under a new name (recompute_shared), and the later fused node
must read the new name too. The 400k-node benchmark graph stopped with "reads v128735, which is
not computed any more" this way; 16 elements show it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from pass_numerics import assert_same, run_ort

import lowering

N = 16
SEED = 18


def _sl1_and_a_prox_of_its_difference() -> onnx.ModelProto:
    """grad = SmoothL1 backward of x = p - l (a graph output), and a proximal update of var = x."""
    nodes = [
        h.make_node("Sub", ["p", "l"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
        h.make_node("Less", ["ax", "beta"], ["lt"]), h.make_node("Mul", ["dout", "x"], ["gx"]),
        h.make_node("Div", ["gx", "beta"], ["lin"]), h.make_node("Sign", ["x"], ["s"]),
        h.make_node("Mul", ["dout", "s"], ["gs"]), h.make_node("Where", ["lt", "lin", "gs"], ["grad"]),
        h.make_node("Mul", ["lr", "delta"], ["step"]), h.make_node("Sub", ["x", "step"], ["q"]),
        h.make_node("Abs", ["q"], ["aq"]), h.make_node("Sub", ["aq", "t"], ["d"]), h.make_node("Relu", ["d"], ["m"]),
        h.make_node("Sign", ["q"], ["sq"]), h.make_node("Mul", ["sq", "m"], ["sm"]),
        h.make_node("Div", ["sm", "k"], ["out"]),
    ]
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("beta", 0.5), ("lr", 0.125), ("t", 0.0625), ("k", 1.03125))]
    inputs = [h.make_tensor_value_info(n, T.FLOAT, (N,)) for n in ("p", "l", "delta")]
    inputs.append(h.make_tensor_value_info("dout", T.FLOAT, ()))
    outputs = [h.make_tensor_value_info(n, T.FLOAT, (N,)) for n in ("out", "grad")]
    graph = h.make_graph(nodes, "g", inputs, outputs, consts)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_later_fused_node_reads_the_renamed_intermediate() -> None:
    model = _sl1_and_a_prox_of_its_difference()
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.counts() == {"SmoothL1LossGradV2": 1, "ApplyProximalGradientDescent": 1}, report.summary()
    prox, = [n for n in fused.graph.node if n.op_type == "ApplyProximalGradientDescent"]
    sub, = [n for n in fused.graph.node if n.op_type == "Sub"]  # x, kept for the update
    assert prox.input[0] == sub.output[0] != "x"
    rng = np.random.default_rng(SEED)
    feeds = {n: rng.standard_normal(N).astype(np.float32) for n in ("p", "l", "delta")}
    feeds["dout"] = np.array(0.7, np.float32)
    feeds["p"][:4] = [0.0, np.nan, np.inf, 0.5]
    feeds["l"][:4] = 0.0
    for before, after in zip(run_ort(model, feeds), run_ort(fused, feeds)):
        assert_same(before, after)
