"""Run a fused model end to end: onnxruntime for the standard nodes, a backend for fused nodes.

The main graph is cut into levels by how many fused nodes lie upstream (_Schedule): the standard
nodes of a level become one small model that onnxruntime runs on the values computed so far,
then each fused node of that level goes through the aclnn shim to the backend's kernel. Each
segment model carries only the local functions its own nodes call. The function body a fused
node carries is never used here; runtime/node_references.py runs it separately, as the
reference for that node.

An If/Loop/Scan node whose bodies hold fused nodes runs here too (runtime/control_flow.py), one
body call per iteration or branch taken, each body cut into levels the same way. Where
onnxruntime cannot run the graph whole (runtime/coverage.py), lower runs the ops it has
(runtime/contrib_ops.py) in the main graph, and what depends on any other op is left out.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from codegen.nodes import InputSpec, NodeSpec
from contracts.errors import ToolError
from contracts.fused_ops import OP_SPECS
from lowering.graph import body_label, graph_constants, model_constants, subgraph_inputs
from lowering.terminal import printable
from runtime import aclnn
from runtime.backend import Backend, BackendError
from runtime.contrib_ops import run_contrib
from runtime.control_flow import RUNNERS, ControlFlowError
from runtime.coverage import Coverage, op_label, plan, plan_body
from runtime.fused_node import fused_attrs, is_fused
from runtime.interpreter import KernelExecutionError
from runtime.local_functions import LocalFunctions
from runtime.numerics import NUMPY_DTYPES
from runtime.ort_exec import PreparedModel
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
    where: str = ""  # the body it ran in ("Loop_3/body"), empty for the main graph


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
    """The nodes as a model of their own, whose inputs are what they read, typed as in `env`."""
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
    Nodes lower runs itself (Coverage.by_lower) and If/Loop/Scan nodes whose bodies run here
    (Coverage.control) are placed like fused nodes; nodes that cannot run (Coverage.skipped)
    are left out."""

    standard: list[list[onnx.NodeProto]]  # by level, in graph order
    fused: list[list[tuple[int, onnx.NodeProto]]]  # by level: (graph position, node)
    exported: set[str]  # values read outside the level's standard batch, or graph outputs


def _schedule(nodes: list[onnx.NodeProto], outputs: list[str], cov: Coverage) -> _Schedule:
    depth: dict[str, int] = {}
    batch_of: dict[str, tuple[bool, int]] = {}  # value -> (run apart from onnxruntime, level)
    standard: list[list[onnx.NodeProto]] = []
    fused: list[list[tuple[int, onnx.NodeProto]]] = []
    exported = set(outputs)
    for position, node in enumerate(nodes):
        if position in cov.skipped:
            continue
        reads = _node_reads(node)
        level = max((depth.get(r, 0) for r in reads), default=0)
        here = (cov.apart(position), level)
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
    runs: list[FusedRun]  # fused nodes that ran, in graph order (inside a body: one per run, in order)
    coverage: Coverage
    not_run: list[tuple[onnx.NodeProto, str]] = field(default_factory=list)  # fused nodes left out, why
    missing: dict[str, str] = field(default_factory=dict)  # graph output -> why it cannot be computed
    updates: dict[str, Update] = field(default_factory=dict)  # by the value a node wrote into in place


@dataclass
class _Segment:
    """One level's standard nodes as a model, loaded once per shapes of what it reads."""

    nodes: list[onnx.NodeProto]
    outputs: list[str]
    sessions: dict[tuple, PreparedModel] = field(default_factory=dict)


@dataclass
class _Plan:
    """How one graph runs: its coverage and its levels (standard segment, nodes run apart)."""

    graph: onnx.GraphProto  # kept, so that the id the plan is cached by stays its own
    coverage: Coverage
    levels: list[tuple[_Segment, list[tuple[int, onnx.NodeProto]]]]


class _Executor:
    """Runs a fused model's graphs: the main graph, and the bodies of the If/Loop/Scan nodes
    that hold fused nodes, once per iteration or branch taken, each fused node on the backend.
    Schedules and onnxruntime sessions are made once per graph and reused by every iteration."""

    def __init__(self, model: onnx.ModelProto, functions: LocalFunctions, cov: Coverage, backend: Backend,
                 target: str, progress: Progress | None) -> None:
        self.model = model
        self.functions = functions
        self.backend = backend
        self.target = target
        self.progress = progress
        self.runs: list[tuple[int, FusedRun]] = []
        self.updates: dict[str, Update] = {}
        self._position = 0  # of the main-graph node being run: runs inside a body sort with it
        self._plans: dict[int, _Plan] = {}
        self._constants: dict[int, dict[str, np.ndarray]] = {}
        self._bodies: dict[tuple[int, str], tuple[onnx.NodeProto, onnx.GraphProto]] = {}  # node kept: its id stays
        self._scan_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.main = self._plan(model.graph, cov, [o.name for o in model.graph.output if o.name not in cov.dead])

    def _plan(self, graph: onnx.GraphProto, cov: Coverage | None = None, outputs: list[str] | None = None) -> _Plan:
        found = self._plans.get(id(graph))
        if found is None:
            cov = cov if cov is not None else plan_body(graph)
            schedule = _schedule(list(graph.node), [o.name for o in graph.output] if outputs is None else outputs, cov)
            levels = [(_Segment(segment, [o for n in segment for o in n.output if o in schedule.exported]), apart)
                      for segment, apart in zip(schedule.standard, schedule.fused)]
            found = self._plans[id(graph)] = _Plan(graph, cov, levels)
        return found

    def counted(self) -> int:
        """The main graph's fused nodes and nodes whose bodies hold some: what progress counts."""
        cov = self.main.coverage
        return sum(k in cov.kernels or k in cov.control for _, apart in self.main.levels for k, _ in apart)

    def run_graph(self, graph: onnx.GraphProto, env: MutableMapping[str, np.ndarray],
                  constants: Mapping[str, np.ndarray], where: str) -> None:
        """Computes the graph's values into `env` (which also holds what the graph reads)."""
        top = not where
        found = self._plan(graph)
        cov = found.coverage
        for segment, apart in found.levels:
            if segment.outputs:
                env.update(self._run_segment(segment, env))
            for position, node in apart:
                if top:
                    self._position = position
                if position in cov.kernels:
                    run = _run_fused_node(node, env, constants, self.backend, self.target)
                    run.where = where
                    self.runs.append((self._position, run))
                elif position in cov.control:
                    self._run_control(node, env, constants, where)
                else:
                    _run_by_lower(node, env, self.updates, cov)
                    continue
                if top and self.progress:
                    self.progress.advance()

    def _run_segment(self, segment: _Segment, env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        produced = {o for n in segment.nodes for o in n.output if o}
        reads = list(dict.fromkeys(r for n in segment.nodes for r in _node_reads(n) if r not in produced))
        missing = [r for r in reads if r not in env]
        if missing:
            raise GraphExecError(f"value '{printable(missing[0])}' is used before it is computed")
        values = {r: np.asarray(env[r]) for r in reads}
        key = tuple((r, str(v.dtype), v.shape) for r, v in values.items())
        prepared = segment.sessions.get(key)
        if prepared is None:
            seg = _segment_model(self.model, self.functions, segment.nodes, values, segment.outputs)
            prepared = segment.sessions[key] = PreparedModel(seg)
        return prepared.run(values)

    def _body(self, node: onnx.NodeProto, attribute: str) -> onnx.GraphProto:
        """The node's graph attribute, as one object for every call (plans are cached by it)."""
        key = (id(node), attribute)
        found = self._bodies.get(key)
        if found is None:
            graph = next((a.g for a in node.attribute if a.name == attribute and a.type == onnx.AttributeProto.GRAPH),
                         None)
            if graph is None:
                raise GraphExecError(f"{node.op_type} node '{printable(node.name)}' has no {attribute} graph")
            found = self._bodies[key] = (node, graph)
        return found[1]

    def _body_constants(self, body: onnx.GraphProto, outer: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        own = self._constants.get(id(body))
        if own is None:
            own = self._constants[id(body)] = graph_constants(body)
        return ChainMap(own, dict(outer)) if own else outer

    def _run_control(self, node: onnx.NodeProto, env: MutableMapping[str, np.ndarray],
                     constants: Mapping[str, np.ndarray], where: str) -> None:
        runner = RUNNERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if runner is None or (node.op_type == "Scan" and self._scan_opset < 9):
            raise GraphExecError(f"node '{printable(node.name)}' ({printable(node.op_type)}) holds fused nodes in "
                                 "a graph attribute, which only If, Loop and Scan (opset 9 and later) can run")

        def call(attribute: str, formals: Sequence[np.ndarray]) -> list[np.ndarray]:
            body = self._body(node, attribute)
            label = body_label(node, attribute)
            local: ChainMap[str, np.ndarray] = ChainMap({}, env)
            local.maps[0].update((t.name, numpy_helper.to_array(t)) for t in body.initializer)
            local.maps[0].update((vi.name, value) for vi, value in zip(body.input, formals))
            self.run_graph(body, local, self._body_constants(body, constants), f"{where}/{label}" if where else label)
            missing = [o.name for o in body.output if o.name not in local]
            if missing:
                raise GraphExecError(f"output '{printable(missing[0])}' of {printable(label)} was never computed")
            return [np.asarray(local[o.name]) for o in body.output]

        try:
            outputs = runner(node, env, call)
        except ControlFlowError as exc:
            raise GraphExecError(str(exc)) from None
        env.update((name, value) for name, value in zip(node.output, outputs) if name)


def _fused_inside(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The fused nodes in `node`'s bodies, at any depth, in graph order."""
    found: list[onnx.NodeProto] = []
    for a in node.attribute:
        for graph in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            for inner in graph.node:
                if is_fused(inner):
                    found.append(inner)
                else:
                    found += _fused_inside(inner)
    return found


def run_graph(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: Backend, target: str,
              progress: Progress | None = None, what: str = "fused model", kernels: bool = True) -> GraphRun:
    """Run `model` on `feeds`: standard nodes in onnxruntime, fused nodes on `backend` (with
    `kernels` False, as their function bodies in onnxruntime: a reference run), If/Loop/Scan
    nodes whose bodies hold fused nodes here, one body call at a time, the ops onnxruntime's
    package lacks through runtime/contrib_ops.py where lower has them; what depends on any other
    op is left out and said why (GraphRun.not_run, .missing)."""
    graph = model.graph
    functions = LocalFunctions(model)
    cov = plan(model, functions, kernels)
    env: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    env.update(feeds)
    executor = _Executor(model, functions, cov, backend, target, progress)
    counted = executor.counted()
    if progress:
        progress.stage(f"{what}: fused nodes on the {backend.name} backend" if counted
                       else f"{what}: onnxruntime and the ops lower runs", total=counted)
    executor.run_graph(graph, env, model_constants(model), "")
    result = GraphRun({}, [], cov, updates=executor.updates)
    nodes = list(graph.node)
    for k in sorted(cov.skipped):
        if k in cov.kernels:
            result.not_run.append((nodes[k], cov.why[k]))
        elif kernels:
            result.not_run += [(inner, cov.why[k]) for inner in _fused_inside(nodes[k])]
    result.missing = {o.name: cov.dead[o.name] for o in graph.output if o.name in cov.dead}
    absent = [o.name for o in graph.output if o.name not in env and o.name not in result.missing]
    if absent:
        raise GraphExecError(f"graph output '{printable(absent[0])}' was never computed")
    executor.runs.sort(key=lambda item: item[0])  # stable: the runs of one body keep their order
    result.outputs = {o.name: env[o.name] for o in graph.output if o.name in env}
    result.runs = [run for _, run in executor.runs]
    return result


def run_fused_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: Backend,
                    target: str, progress: Progress | None = None
                    ) -> tuple[dict[str, np.ndarray], list[FusedRun]]:
    """Graph outputs of the fused model on `feeds`, and a record of every fused node's run (in
    graph order; a fused node inside a loop body has one run per iteration, in order). A graph
    output that cannot be computed here is an error."""
    result = run_graph(model, feeds, backend, target, progress)
    if result.missing:
        name, why = next(iter(result.missing.items()))
        raise GraphExecError(f"graph output '{printable(name)}' cannot be computed: it {why}")
    return result.outputs, result.runs


def _run_by_lower(node: onnx.NodeProto, env: MutableMapping[str, np.ndarray], updates: dict[str, Update],
                  cov: Coverage) -> None:
    """A node whose op onnxruntime's package lacks, through lower's implementation."""
    result = run_contrib(node, [np.asarray(env[n]) if n else None for n in node.input])
    env.update((name, value) for name, value in zip(node.output, result.outputs) if name and value is not None)
    via = frozenset().union(*(cov.via.get(o, frozenset()) for o in node.output))
    updates.update((node.input[k], Update(value, op_label(node), via)) for k, value in result.updates.items())


def _run_fused_node(node: onnx.NodeProto, env: MutableMapping[str, np.ndarray], constants: Mapping[str, np.ndarray],
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
