"""Run a fused model end to end: onnxruntime for the standard nodes, a backend for fused nodes.

The main graph is cut at its fused nodes: each maximal run of standard nodes becomes a small
model that onnxruntime runs on the values computed so far, and each fused node goes through the
aclnn shim to the backend's kernel. The function body a fused node carries is never used here;
`run_function_body` runs it separately, as the reference for that node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from codegen.nodes import InputSpec, NodeSpec
from lowering.fused_ops import OP_SPECS
from lowering.graph import model_constants, subgraph_inputs
from runtime import aclnn
from runtime.backend import Backend, BackendError
from runtime.fused_node import fused_attrs, is_fused
from runtime.interpreter import KernelExecutionError
from runtime.numerics import NUMPY_DTYPES
from runtime.ort_exec import run_model

Progress = Callable[[str], None]

_DTYPE_NAME = {v: k for k, v in NUMPY_DTYPES.items()}


class GraphExecError(RuntimeError):
    """The fused model cannot be executed; one line naming the node or value."""


@dataclass
class FusedRun:
    """One fused node's execution: what went in and what its kernel produced."""

    node: onnx.NodeProto
    spec: NodeSpec
    inputs: dict[str, np.ndarray]  # by contract input name
    outputs: dict[str, np.ndarray]  # by contract output name (NaN-filled when the kernel failed)
    error: str = ""  # why the kernel failed, empty when it ran


def _elem_type(arr: np.ndarray) -> int:
    if arr.dtype == np.dtype(ml_dtypes.bfloat16):
        return onnx.TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(arr.dtype)


def _value_info(name: str, arr: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _elem_type(arr), list(arr.shape))


def _node_reads(node: onnx.NodeProto) -> list[str]:
    return [n for n in node.input if n] + sorted(subgraph_inputs(node))


def _segment_model(model: onnx.ModelProto, nodes: list[onnx.NodeProto], env: Mapping[str, np.ndarray],
                   outputs: list[str]) -> onnx.ModelProto:
    produced = {o for n in nodes for o in n.output if o}
    # once each, also when one node reads a value twice (Slice(x, c, c, c), Mul(x, x))
    reads = list(dict.fromkeys(r for n in nodes for r in _node_reads(n) if r not in produced))
    missing = [r for r in reads if r not in env]
    if missing:
        raise GraphExecError(f"value {missing[0]!r} is used before it is computed")
    graph = helper.make_graph(nodes, "segment", [_value_info(r, np.asarray(env[r])) for r in reads],
                              [onnx.ValueInfoProto(name=o) for o in outputs])
    seg = helper.make_model(graph, opset_imports=list(model.opset_import),
                            functions=list(model.functions))
    seg.ir_version = model.ir_version
    return seg


def node_spec_at_runtime(node: onnx.NodeProto, inputs: Mapping[str, np.ndarray],
                         constants: Mapping[str, np.ndarray]) -> NodeSpec:
    """The fused node as codegen sees it, with the concrete shapes of this run."""
    op = OP_SPECS[node.op_type]
    specs = {}
    for role, value in zip(op.inputs, node.input):
        arr = inputs[role]
        if arr.dtype not in _DTYPE_NAME:
            raise GraphExecError(f"node {node.name!r}: input {role} is {arr.dtype}; fused ops take float32, float16, bfloat16")
        const = None
        if value in constants and constants[value].size == 1:
            const = float(np.asarray(constants[value], np.float64).reshape(-1)[0])
        specs[role] = InputSpec(_DTYPE_NAME[arr.dtype], tuple(int(d) for d in arr.shape), const)
    return NodeSpec(node.name, node.op_type, specs, fused_attrs(node))


def run_fused_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: Backend,
                    target: str, progress: Progress | None = None
                    ) -> tuple[dict[str, np.ndarray], list[FusedRun]]:
    """Graph outputs of the fused model on `feeds`, and a record of every fused node's run."""
    graph = model.graph
    constants = model_constants(model)
    env: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    env.update(feeds)
    nodes = list(graph.node)
    # names read at or after each node position, plus the graph outputs
    needed_after: list[set[str]] = [set()] * (len(nodes) + 1)
    acc = {o.name for o in graph.output}
    needed_after[len(nodes)] = set(acc)
    for i in range(len(nodes) - 1, -1, -1):
        acc |= set(_node_reads(nodes[i]))
        needed_after[i] = set(acc)
    runs: list[FusedRun] = []
    i = 0
    while i < len(nodes):
        if is_fused(nodes[i]):
            runs.append(_run_fused_node(nodes[i], env, constants, backend, target, progress))
            i += 1
            continue
        j = i
        while j < len(nodes) and not is_fused(nodes[j]):
            j += 1
        segment = nodes[i:j]
        outputs = [o for n in segment for o in n.output if o and o in needed_after[j]]
        if outputs:
            if progress:
                progress(f"onnxruntime: {len(segment)} standard node(s)")
            env.update(run_model(_segment_model(model, segment, env, outputs), env))
        i = j
    missing = [o.name for o in graph.output if o.name not in env]
    if missing:
        raise GraphExecError(f"graph output {missing[0]!r} was never computed")
    return {o.name: env[o.name] for o in graph.output}, runs


def _run_fused_node(node: onnx.NodeProto, env: dict[str, np.ndarray], constants: Mapping[str, np.ndarray],
                    backend: Backend, target: str, progress: Progress | None) -> FusedRun:
    op = OP_SPECS[node.op_type]
    missing = [n for n in node.input if n not in env]
    if missing:
        raise GraphExecError(f"node {node.name!r}: input {missing[0]!r} is not computed")
    inputs = {role: np.asarray(env[name]) for role, name in zip(op.inputs, node.input)}
    spec = node_spec_at_runtime(node, inputs, constants)
    if progress:
        n = inputs[op.inputs[0]].size
        progress(f"{backend.name} backend: {node.op_type} {node.name!r} ({n} elements)")
    error = ""
    try:
        outputs = aclnn.run_fused(spec, inputs, backend, target)
    except (BackendError, KernelExecutionError) as exc:
        # Keep going so the report names this node; NaN makes every consumer FAIL as well.
        error = str(exc)
        first = inputs[op.inputs[0]]
        outputs = {role: np.full(first.shape, np.nan, first.dtype) for role in op.outputs}
    for role, name in zip(op.outputs, node.output):
        env[name] = outputs[role]
    return FusedRun(node, spec, inputs, outputs, error)


def function_body(model: onnx.ModelProto, node: onnx.NodeProto) -> onnx.FunctionProto | None:
    for fn in model.functions:
        if fn.domain == node.domain and fn.name == node.op_type and fn.overload == node.overload:
            return fn
    return None


def run_function_body(model: onnx.ModelProto, node: onnx.NodeProto,
                      inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """onnxruntime on the fused node's matched subgraph (its function body); None without one.

    `inputs` and the result are keyed by contract names (OP_SPECS).
    """
    fn = function_body(model, node)
    if fn is None:
        return None
    op = OP_SPECS[node.op_type]
    declared = set(fn.attribute) | {a.name for a in fn.attribute_proto}
    call = onnx.NodeProto()
    call.CopyFrom(node)
    del call.attribute[:]
    call.attribute.extend(a for a in node.attribute if a.name in declared)
    in_names = [f"in_{k}" for k in range(len(node.input))]
    out_names = [f"out_{k}" for k in range(len(node.output))]
    call.input[:] = in_names
    call.output[:] = out_names
    feeds = {n: np.asarray(inputs[role]) for n, role in zip(in_names, op.inputs)}
    graph = helper.make_graph([call], "fused_node_reference",
                              [_value_info(n, a) for n, a in feeds.items()],
                              [onnx.ValueInfoProto(name=o) for o in out_names])
    ref = helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    ref.ir_version = model.ir_version
    result = run_model(ref, feeds)
    return {role: result[o] for role, o in zip(op.outputs, out_names)}
