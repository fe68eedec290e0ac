"""The runs of each fused node, for its row of the diff report.

A fused node of the main graph runs once. One inside a loop body runs once per iteration, and one
in an If branch once per time the branch is taken (or never): its row compares every run it made,
each against its reference on the inputs it really saw, stacked into one comparison, and says
how many runs that was ("checked in 100 iterations of Loop_3/body").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from contracts.fused_ops import DOMAIN, OP_SPECS
from lowering.graph import body_label, may_have_subgraphs
from lowering.terminal import printable
from runtime.graph_exec import FusedRun


@dataclass
class NodeRuns:
    """The runs of one fused node, in the order they ran."""

    node: onnx.NodeProto
    where: str  # the body it is in, empty for the main graph
    runs: list[FusedRun] = field(default_factory=list)

    def checked_in(self) -> str:
        """The note of a node inside a body: how many runs its row compares."""
        if not self.where:
            return ""
        n = len(self.runs)
        if self.where.endswith("/body"):
            return f"checked in {n} iteration{'s' if n != 1 else ''} of {printable(self.where)}"
        return f"checked in {n} run{'s' if n != 1 else ''} of {printable(self.where)}, the branch taken"


def node_key(node: onnx.NodeProto) -> tuple[str, ...]:
    """What tells one fused node from another: its outputs (a value is defined once in a model,
    whatever the nodes are named)."""
    return tuple(node.output)


def by_node(runs: list[FusedRun]) -> list[NodeRuns]:
    """The runs grouped by fused node, in the order of each node's first run."""
    groups: dict[tuple[str, ...], NodeRuns] = {}
    for run in runs:
        key = node_key(run.node)
        if key not in groups:
            groups[key] = NodeRuns(run.node, run.where)
        groups[key].runs.append(run)
    return list(groups.values())


def never_run(model: onnx.ModelProto, groups: list[NodeRuns]) -> list[NodeRuns]:
    """The fused nodes inside bodies that did not run at all (a branch not taken, a loop of no
    iteration), each with the body it is in."""
    ran = {node_key(g.node) for g in groups}
    found: list[NodeRuns] = []

    def walk(graph: onnx.GraphProto, where: str) -> None:
        for node in graph.node:
            if where and node.domain == DOMAIN and node.op_type in OP_SPECS and node_key(node) not in ran:
                found.append(NodeRuns(node, where))
            if not may_have_subgraphs(node):
                continue
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    label = body_label(node, a.name)
                    walk(a.g, f"{where}/{label}" if where else label)

    walk(model.graph, "")
    return found


def positions(model: onnx.ModelProto) -> dict[tuple[str, ...], int]:
    """The main-graph position of each fused node: its own, or that of the If/Loop/Scan node
    whose bodies hold it (at any depth)."""
    found: dict[tuple[str, ...], int] = {}

    def walk(graph: onnx.GraphProto, position: int | None) -> None:
        for k, node in enumerate(graph.node):
            at = k if position is None else position
            if node.domain == DOMAIN and node.op_type in OP_SPECS:
                found[node_key(node)] = at
            if may_have_subgraphs(node):
                for a in node.attribute:
                    for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                        walk(g, at)

    walk(model.graph, None)
    return found


def stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays of several runs as one: stacked on a new first axis when their shapes agree
    (a loop-invariant value), else flattened and joined."""
    if len(arrays) == 1:
        return np.asarray(arrays[0])
    if len({np.shape(a) for a in arrays}) == 1:
        return np.stack(arrays)
    return np.concatenate([np.ravel(a) for a in arrays])
