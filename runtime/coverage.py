"""What of a graph can be computed here: by onnxruntime's CPU package, by lower itself, or not at all.

onnxruntime refuses a whole model when one node's op has no schema in its build (the training-only
com.microsoft ops of onnxruntime-training's graphs). Rather than give up, a diff runs each node
where it can: onnxruntime for the ops its package registers, lower's own implementation
(runtime/contrib_ops.py) for the ops it has, and nothing for the rest. Values downstream of a node
that nothing here runs cannot be computed, and the comparisons that need them are skipped with
the reason; values downstream of a node lower ran rest on lower's implementation, not on
onnxruntime, and the report says which.

Which ops onnxruntime runs comes from the schemas its package registers (one look-up per node).
A registered op that still has no CPU kernel for the node's types makes onnxruntime fail when it
loads the model, which the diff reports as bad input, as before.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx

from codegen.nodes import holds_fused_nodes
from lowering.graph import body_label, may_have_subgraphs, subgraph_inputs
from lowering.terminal import printable
from runtime.contrib_ops import implements
from runtime.fused_node import is_fused
from runtime.local_functions import LocalFunctions, function_key

_ONNX_DOMAINS = {"", "ai.onnx"}
_STANDARD_DOMAINS = _ONNX_DOMAINS | {"ai.onnx.ml"}


@functools.cache
def _registered() -> frozenset[tuple[str, str]] | None:
    """(domain, op type) of every schema onnxruntime's package registers; None when this build
    does not say (then every op counts as runnable, and onnxruntime itself decides)."""
    try:
        from onnxruntime.capi import _pybind_state
        schemas = _pybind_state.get_all_operator_schema()
    except (ImportError, AttributeError):
        return None
    return frozenset(("" if s.domain in _ONNX_DOMAINS else s.domain, s.name) for s in schemas)


def op_label(node: onnx.NodeProto) -> str:
    """'com.microsoft Scale', or the bare op type for the ONNX domain."""
    domain = "" if node.domain in _ONNX_DOMAINS else node.domain
    return printable(f"{domain} {node.op_type}" if domain else node.op_type)


class OrtOps:
    """Which nodes of one model onnxruntime's package runs (a call of a model-local function
    when its body does, an If/Loop/Scan when its subgraphs do). Ops of the ONNX domains count as
    run without a look-up: reading onnxruntime's schemas takes a noticeable fraction of a second,
    paid only for a model with ops of other domains."""

    def __init__(self, model: onnx.ModelProto, functions: LocalFunctions | None = None) -> None:
        self._functions = functions or LocalFunctions(model)
        self._bodies: dict[tuple[str, str, str], bool] = {}

    def runs(self, node: onnx.NodeProto) -> bool:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH and not self.runs_all(a.g.node):
                return False
            if a.type == onnx.AttributeProto.GRAPHS and not all(self.runs_all(g.node) for g in a.graphs):
                return False
        fn = self._functions.called_by(node)
        if fn is not None:
            key = function_key(node)
            if key not in self._bodies:
                self._bodies[key] = False  # a function that calls itself is refused by the checker
                self._bodies[key] = self.runs_all(fn.node)
            return self._bodies[key]
        if node.domain in _STANDARD_DOMAINS:
            return True
        registered = _registered()
        return registered is None or (node.domain, node.op_type) in registered

    def runs_all(self, nodes: Iterable[onnx.NodeProto]) -> bool:
        return all(self.runs(n) for n in nodes)


@dataclass
class Coverage:
    """How the nodes of one graph run (node positions in graph order): fused nodes as kernels,
    the rest in onnxruntime except those it cannot run."""

    kernels: set[int] = field(default_factory=set)  # fused nodes that run as kernels on the backend
    by_lower: set[int] = field(default_factory=set)  # lower runs them (runtime/contrib_ops.py)
    control: set[int] = field(default_factory=set)  # If/Loop/Scan nodes whose bodies hold kernels: run here
    skipped: set[int] = field(default_factory=set)  # nothing runs them, or an input cannot be computed
    why: dict[int, str] = field(default_factory=dict)  # skipped node -> why
    dead: dict[str, str] = field(default_factory=dict)  # value -> why it cannot be computed
    via: dict[str, frozenset[str]] = field(default_factory=dict)  # value -> ops lower ran on the way to it
    not_in_ort: Counter[str] = field(default_factory=Counter)  # op label -> nodes onnxruntime cannot run
    lower_ran: Counter[str] = field(default_factory=Counter)  # op label -> nodes of them lower runs

    def apart(self, position: int) -> bool:
        """Whether the node runs outside onnxruntime's segments (a kernel, lower's op, a body run here)."""
        return position in self.kernels or position in self.by_lower or position in self.control

    @property
    def complete(self) -> bool:
        """onnxruntime runs every node that does not run as a kernel."""
        return not self.not_in_ort

    def dead_reads(self, node: onnx.NodeProto) -> str:
        """Why one of the values `node` reads cannot be computed ('' when all can)."""
        for name in _reads(node):
            if name in self.dead:
                return self.dead[name]
        return ""


def _reads(node: onnx.NodeProto) -> list[str]:
    return [n for n in node.input if n] + sorted(subgraph_inputs(node))


def _holds_kernels(node: onnx.NodeProto) -> bool:
    return may_have_subgraphs(node) and holds_fused_nodes(node)


def _body_blocker(node: onnx.NodeProto, ort: OrtOps, kernels: bool) -> tuple[onnx.NodeProto, str] | None:
    """The first node inside `node`'s bodies, at any depth, that onnxruntime cannot run, and the
    body it is in ("Loop_3/body"); with `kernels`, fused nodes run on the backend and the If/Loop/
    Scan nodes holding them here, so neither counts. None when there is none."""
    for a in node.attribute:
        for graph in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            for inner in graph.node:
                if kernels and is_fused(inner):
                    continue
                if (kernels and _holds_kernels(inner)) or not ort.runs(inner):
                    found = _body_blocker(inner, ort, kernels)
                    if found is not None:
                        return found[0], f"{body_label(node, a.name)}/{found[1]}"
                    if not ort.runs(inner):
                        return inner, body_label(node, a.name)
    return None


def _why_not_run(node: onnx.NodeProto, ort: OrtOps, kernels: bool) -> str:
    """Why nothing here runs `node`, naming the op inside its bodies that keeps them from running."""
    found = _body_blocker(node, ort, kernels)
    if found is None:
        return f"needs {op_label(node)}, which neither onnxruntime nor lower runs"
    inner, where = found
    # lower's own ops run in the main graph only: in a body, an in-place write would have to
    # persist from one iteration to the next
    runs = "which lower runs only in the main graph" if implements(inner) else \
        "which neither onnxruntime nor lower runs"
    return f"needs {op_label(inner)} inside {printable(where)}, {runs}"


def plan_body(graph: onnx.GraphProto) -> Coverage:
    """How a body that plan() let run here runs: its fused nodes as kernels, its If/Loop/Scan
    nodes that hold fused nodes here, the rest in onnxruntime (plan() checked it runs them)."""
    nodes = list(graph.node)
    return Coverage(kernels={k for k, n in enumerate(nodes) if is_fused(n)},
                    control={k for k, n in enumerate(nodes) if not is_fused(n) and _holds_kernels(n)})


def plan(model: onnx.ModelProto, functions: LocalFunctions | None = None, kernels: bool = True) -> Coverage:
    """Which nodes of `model`'s main graph lower runs, which do not run, and what that leaves
    unknown. Fused nodes run as kernels on the backend, or with `kernels` False (a reference
    run) as their function bodies in onnxruntime, like any call of a local function; so do the
    fused nodes inside If/Loop/Scan bodies, whose owners then run here one body call at a time
    (Coverage.control) unless a body holds a node onnxruntime cannot run."""
    ort = OrtOps(model, functions)
    nodes = list(model.graph.node)
    cov = Coverage(kernels={k for k, n in enumerate(nodes) if is_fused(n)} if kernels else set())
    if kernels:
        cov.control = {k for k, n in enumerate(nodes)
                       if k not in cov.kernels and _holds_kernels(n) and _body_blocker(n, ort, True) is None}
    foreign = [k not in cov.kernels and k not in cov.control and not ort.runs(n) for k, n in enumerate(nodes)]
    if not any(foreign):
        return cov
    for position, (node, alien) in enumerate(zip(nodes, foreign)):
        why = cov.dead_reads(node)
        if alien:
            cov.not_in_ort[op_label(node)] += 1
        if not why and alien and not implements(node):
            why = _why_not_run(node, ort, kernels)
        if why:
            cov.skipped.add(position)
            cov.why[position] = why
            cov.dead.update((o, why) for o in node.output if o)
            continue
        upstream = frozenset().union(*(cov.via.get(r, frozenset()) for r in _reads(node)))
        if alien:
            cov.by_lower.add(position)
            cov.lower_ran[op_label(node)] += 1
            upstream |= {op_label(node)}
        if upstream:
            cov.via.update((o, upstream) for o in node.output if o)
    return cov
