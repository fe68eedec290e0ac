"""Model-local functions: patterns inside them are found by inlining their calls first.

TorchScript's `export_modules_as_functions` and hand-written onnxscript models keep module bodies
in model-local functions, where a pass over the main graph never looks. The calls of every
function that could hold a pattern (its body, or a function it calls, has an op every pattern
needs) are inlined with onnx's own inliner; the pass keeps the inlined model only when a fusion
took nodes that came out of a function, so a model whose functions hold nothing to fuse keeps
its structure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import onnx
import onnx.inliner

from .fused_ops import DOMAIN
from .graph import node_label
from .report import FusionReport

# every form of both families has one of these (a sign, a select, a clamp or an absolute value)
SEED_OPS = frozenset({"Sign", "Where", "Clip", "Min", "Max", "Abs", "Relu"})


@dataclass
class Inlined:
    model: onnx.ModelProto
    functions: list[str]  # "domain.name" of each function whose calls were inlined
    new_labels: set[str]  # node_label of each node the inlining made


def _calls(nodes: Iterable[onnx.NodeProto], local: dict[tuple[str, str], onnx.FunctionProto]) -> set[tuple[str, str]]:
    return {key for n in nodes if (key := (n.domain, n.op_type)) in local}


def candidates(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """The local functions, reachable from the main graph, whose calls must be inlined to show a
    pattern: those with a seed op in their body or in a function they call (our own fused ops'
    functions are never among them: they are the result of an earlier run)."""
    local = {(f.domain, f.name): f for f in model.functions if f.domain != DOMAIN}
    if not local:
        return []
    reachable: list[tuple[str, str]] = []
    stack = sorted(_calls(model.graph.node, local))
    while stack:
        key = stack.pop()
        if key in reachable:
            continue
        reachable.append(key)
        stack.extend(sorted(_calls(local[key].node, local)))
    seeded = {key for key in reachable if any(n.op_type in SEED_OPS and n.domain in ("", "ai.onnx")
                                              for n in local[key].node)}
    changed = True
    while changed:  # a function that calls a seeded one is seeded too
        changed = False
        for key in reachable:
            if key not in seeded and _calls(local[key].node, local) & seeded:
                seeded.add(key)
                changed = True
    return [key for key in reachable if key in seeded]


def inline(model: onnx.ModelProto) -> Inlined | None:
    """The model with the calls of candidates() inlined, or None when there is nothing to inline
    or onnx's inliner cannot do it (the pass then works on the main graph as it is)."""
    keys = candidates(model)
    if not keys:
        return None
    try:
        inlined = onnx.inliner.inline_selected_functions(model, keys, exclude=False)
    except Exception:  # noqa: BLE001 - any failure of the inliner means: do not look inside
        return None
    before = {node_label(n) for n in model.graph.node}
    return Inlined(inlined, [f"{d}.{n}" if d else n for d, n in keys],
                   {node_label(n) for n in inlined.graph.node} - before)


def fused_inside(report: FusionReport, inlined: Inlined) -> bool:
    """Whether some fusion took a node that the inlining made."""
    return any(not inlined.new_labels.isdisjoint(f.replaced_nodes) for f in report.fusions)
