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

from lowering.graph import subgraph_inputs
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
    skipped: set[int] = field(default_factory=set)  # nothing runs them, or an input cannot be computed
    dead: dict[str, str] = field(default_factory=dict)  # value -> why it cannot be computed
    via: dict[str, frozenset[str]] = field(default_factory=dict)  # value -> ops lower ran on the way to it
    not_in_ort: Counter[str] = field(default_factory=Counter)  # op label -> nodes onnxruntime cannot run
    lower_ran: Counter[str] = field(default_factory=Counter)  # op label -> nodes of them lower runs

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


def plan(model: onnx.ModelProto, functions: LocalFunctions | None = None, kernels: bool = True) -> Coverage:
    """Which nodes of `model`'s main graph lower runs, which do not run, and what that leaves
    unknown. Fused nodes run as kernels on the backend, or with `kernels` False (a reference
    run) as their function bodies in onnxruntime, like any call of a local function."""
    ort = OrtOps(model, functions)
    nodes = list(model.graph.node)
    cov = Coverage(kernels={k for k, n in enumerate(nodes) if is_fused(n)} if kernels else set())
    foreign = [k not in cov.kernels and not ort.runs(n) for k, n in enumerate(nodes)]
    if not any(foreign):
        return cov
    for position, (node, alien) in enumerate(zip(nodes, foreign)):
        why = cov.dead_reads(node)
        if alien:
            cov.not_in_ort[op_label(node)] += 1
        if not why and alien and not implements(node):
            why = f"needs {op_label(node)}, which neither onnxruntime nor lower runs"
        if why:
            cov.skipped.add(position)
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
