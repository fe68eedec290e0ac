"""Run a fused model end to end: onnxruntime for the standard nodes, a backend for fused nodes.

The main graph is cut into levels by how many fused nodes lie upstream (_Schedule): the standard
nodes of a level become one small model that onnxruntime runs on the values computed so far,
then each fused node of that level goes through the aclnn shim to the backend's kernel. Each
segment model carries only the local functions its own nodes call. The function body a fused
node carries is never used here; runtime/node_references.py runs it separately, as the
reference for that node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from codegen.nodes import InputSpec, NodeSpec
from lowering.errors import ToolError
from lowering.fused_ops import OP_SPECS
from lowering.graph import model_constants, subgraph_inputs
from lowering.terminal import printable
from runtime import aclnn
from runtime.backend import Backend, BackendError
from runtime.contrib_ops import run_contrib
from runtime.coverage import Coverage, op_label, plan
from runtime.fused_node import fused_attrs
from runtime.interpreter import KernelExecutionError
from runtime.local_functions import LocalFunctions
from runtime.numerics import NUMPY_DTYPES
from runtime.ort_exec import run_model
from runtime.progress import Progress

_DTYPE_NAME = {v: k for k, v in NUMPY_DTYPES.items()}


class GraphExecError(ToolError, RuntimeError):
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


def value_info(name: str, arr: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _elem_type(arr), list(arr.shape))


def _node_reads(node: onnx.NodeProto) -> list[str]:
    return [n for n in node.input if n] + sorted(subgraph_inputs(node))


def _segment_model(model: onnx.ModelProto, functions: LocalFunctions, nodes: list[onnx.NodeProto],
                   env: Mapping[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto:
    produced = {o for n in nodes for o in n.output if o}
    # once each, also when one node reads a value twice (Slice(x, c, c, c), Mul(x, x))
    reads = list(dict.fromkeys(r for n in nodes for r in _node_reads(n) if r not in produced))
    missing = [r for r in reads if r not in env]
    if missing:
        raise GraphExecError(f"value '{printable(missing[0])}' is used before it is computed")
    graph = helper.make_graph(nodes, "segment", [value_info(r, np.asarray(env[r])) for r in reads],
                              [onnx.ValueInfoProto(name=o) for o in outputs])
    seg = helper.make_model(graph, opset_imports=list(model.opset_import),
                            functions=functions.needed_by(nodes))
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
            raise GraphExecError(f"node '{printable(node.name)}': input {role} is {arr.dtype}; "
                                 "fused ops take float32, float16, bfloat16")
        const = None
        if value in constants and constants[value].size == 1:
            const = float(np.asarray(constants[value], np.float64).reshape(-1)[0])
        specs[role] = InputSpec(_DTYPE_NAME[arr.dtype], tuple(int(d) for d in arr.shape), const)
    return NodeSpec(node.name, node.op_type, specs, fused_attrs(node))


@dataclass
class _Schedule:
    """The graph cut into levels by fused-node depth: level L's standard nodes run as one
    onnxruntime model, then the fused nodes that read values of depth L at most. A value's depth
    is the most fused nodes on a path to it, so the sessions number the longest chain of fused
    nodes plus one, not the fused nodes: an optimizer's thousand parallel updates take two.
    Nodes lower runs itself (Coverage.by_lower) are placed like fused nodes; nodes that cannot
    run (Coverage.skipped) are left out."""

    standard: list[list[onnx.NodeProto]]  # by level, in graph order
    fused: list[list[tuple[int, onnx.NodeProto]]]  # by level: (graph position, node)
    exported: set[str]  # values read outside the level's standard batch, or graph outputs


def _schedule(nodes: list[onnx.NodeProto], outputs: list[str], cov: Coverage) -> _Schedule:
    depth: dict[str, int] = {}
    batch_of: dict[str, tuple[bool, int]] = {}  # value -> (made by a fused node, level)
    standard: list[list[onnx.NodeProto]] = []
    fused: list[list[tuple[int, onnx.NodeProto]]] = []
    exported = set(outputs)
    for position, node in enumerate(nodes):
        if position in cov.skipped:
            continue
        reads = _node_reads(node)
        level = max((depth.get(r, 0) for r in reads), default=0)
        here = (position in cov.kernels or position in cov.by_lower, level)
        exported.update(r for r in reads if batch_of.get(r, here) != here)
        while len(standard) <= level:
            standard.append([])
            fused.append([])
        if here[0]:
            fused[level].append((position, node))
        else:
            standard[level].append(node)
        for o in filter(None, node.output):
            depth[o] = level + here[0]
            batch_of[o] = here
    return _Schedule(standard, fused, exported)


@dataclass(frozen=True)
class Update:
    """A value a node (an accumulator) wrote into one of its inputs in place."""

    value: np.ndarray
    op: str  # the writer's op label
    via: frozenset[str]  # the ops lower ran on the way to it (the writer's among them)


@dataclass
class GraphRun:
    """A fused (or unfused) model's run where onnxruntime may not run every node (Coverage)."""

    outputs: dict[str, np.ndarray]  # the graph outputs that could be computed
    runs: list[FusedRun]  # fused nodes that ran, in graph order
    coverage: Coverage
    not_run: list[tuple[onnx.NodeProto, str]] = field(default_factory=list)  # fused nodes left out, why
    missing: dict[str, str] = field(default_factory=dict)  # graph output -> why it cannot be computed
    updates: dict[str, Update] = field(default_factory=dict)  # by the value a node wrote into in place


def run_graph(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: Backend, target: str,
              progress: Progress | None = None, what: str = "fused model", kernels: bool = True) -> GraphRun:
    """Run `model` on `feeds`: standard nodes in onnxruntime, fused nodes on `backend` (with
    `kernels` False, as their function bodies in onnxruntime: a reference run), the ops
    onnxruntime's package lacks through runtime/contrib_ops.py where lower has them; what depends
    on any other op is left out and said why (GraphRun.not_run, .missing)."""
    graph = model.graph
    constants = model_constants(model)
    functions = LocalFunctions(model)
    cov = plan(model, functions, kernels)
    env: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    env.update(feeds)
    nodes = list(graph.node)
    schedule = _schedule(nodes, [o.name for o in graph.output if o.name not in cov.dead], cov)
    fused_count = sum(k in cov.kernels for level in schedule.fused for k, _ in level)
    if progress:
        progress.stage(f"{what}: fused nodes on the {backend.name} backend" if fused_count
                       else f"{what}: onnxruntime and the ops lower runs", total=fused_count)
    result = GraphRun({}, [], cov)
    runs: list[tuple[int, FusedRun]] = []
    for segment, apart in zip(schedule.standard, schedule.fused):
        outputs = [o for n in segment for o in n.output if o in schedule.exported]
        if outputs:
            seg = _segment_model(model, functions, segment, env, outputs)
            env.update(run_model(seg, {vi.name: env[vi.name] for vi in seg.graph.input}))
        for position, node in apart:
            if position not in cov.kernels:
                _run_by_lower(node, env, result.updates, cov)
                continue
            runs.append((position, _run_fused_node(node, env, constants, backend, target)))
            if progress:
                progress.advance()
    result.not_run = [(n, cov.dead_reads(n)) for k, n in enumerate(nodes) if k in cov.skipped and k in cov.kernels]
    result.missing = {o.name: cov.dead[o.name] for o in graph.output if o.name in cov.dead}
    absent = [o.name for o in graph.output if o.name not in env and o.name not in result.missing]
    if absent:
        raise GraphExecError(f"graph output '{printable(absent[0])}' was never computed")
    runs.sort(key=lambda item: item[0])
    result.outputs = {o.name: env[o.name] for o in graph.output if o.name in env}
    result.runs = [run for _, run in runs]
    return result


def run_fused_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: Backend,
                    target: str, progress: Progress | None = None
                    ) -> tuple[dict[str, np.ndarray], list[FusedRun]]:
    """Graph outputs of the fused model on `feeds`, and a record of every fused node's run (in
    graph order). A graph output that cannot be computed here is an error."""
    result = run_graph(model, feeds, backend, target, progress)
    if result.missing:
        name, why = next(iter(result.missing.items()))
        raise GraphExecError(f"graph output '{printable(name)}' cannot be computed: it {why}")
    return result.outputs, result.runs


def _run_by_lower(node: onnx.NodeProto, env: dict[str, np.ndarray], updates: dict[str, Update],
                  cov: Coverage) -> None:
    """A node whose op onnxruntime's package lacks, through lower's implementation."""
    result = run_contrib(node, [np.asarray(env[n]) if n else None for n in node.input])
    env.update((name, value) for name, value in zip(node.output, result.outputs) if name and value is not None)
    via = frozenset().union(*(cov.via.get(o, frozenset()) for o in node.output))
    updates.update((node.input[k], Update(value, op_label(node), via)) for k, value in result.updates.items())


def _run_fused_node(node: onnx.NodeProto, env: dict[str, np.ndarray], constants: Mapping[str, np.ndarray],
                    backend: Backend, target: str) -> FusedRun:
    op = OP_SPECS[node.op_type]
    missing = [n for n in node.input if n not in env]
    if missing:
        raise GraphExecError(f"node '{printable(node.name)}': input '{printable(missing[0])}' "
                             "is not computed")
    inputs = {role: np.asarray(env[name]) for role, name in zip(op.inputs, node.input)}
    spec = node_spec_at_runtime(node, inputs, constants)
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
