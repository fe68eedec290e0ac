"""The graph pass: normalize -> match -> check -> replace each match by one custom-domain node.

Each fused node carries a model-local ONNX function (same op type, one overload per node) whose
body is the matched subgraph, so onnxruntime and any other ONNX runtime still run the model.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import cleanup
from .algebra import Algebra
from .errors import LoweringError
from .fused_ops import DOMAIN, DOMAIN_VERSION, OP_SPECS
from .graph import DTYPE_NAMES, GraphIndex
from .loading import default_opset
from .normalize import normalize
from .patterns import DEFAULT_PATTERNS
from .patterns.base import Match, NoMatch, Pattern
from .report import Fusion, FusionReport, Rejection

FUNCTION_IR_VERSION = 10  # node/function `overload` needs IR version 10


def node_label(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type} -> {node.output[0] if node.output else '?'}"


def fuse_proto(model: onnx.ModelProto, patterns: Sequence[Pattern] = DEFAULT_PATTERNS) -> tuple[onnx.ModelProto, FusionReport]:
    """Fuses a validated ModelProto; returns a new model and the report. The input is not modified."""
    # the pass allocates millions of small objects that never form cycles; the cyclic collector
    # only adds work that grows faster than the graph
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _fuse_proto(model, patterns)
    finally:
        if enabled:
            gc.enable()


def _fuse_proto(model: onnx.ModelProto, patterns: Sequence[Pattern]) -> tuple[onnx.ModelProto, FusionReport]:
    try:
        work = onnx.shape_inference.infer_shapes(model)  # a new model: the input stays untouched
    except (onnx.shape_inference.InferenceError, ValueError):
        work = onnx.ModelProto()  # shapes stay unknown; shape-dependent matches are refused with a reason
        work.CopyFrom(model)
    graph = work.graph
    report = FusionReport(nodes_before=len(model.graph.node))
    stats = normalize(graph)
    report.normalization = stats.as_dict()
    dead = cleanup.eliminate_dead_code(graph)  # dead uses (an unused forward loss) must not block fusion
    if dead:
        report.normalization["dead nodes removed"] = dead
    index = GraphIndex(graph)
    alg = Algebra(index)
    matches: list[Match] = []
    by_op: dict[str, list[Pattern]] = {}
    for p in patterns:
        for op in p.anchors:
            by_op.setdefault(op, []).append(p)
    explained: dict[str, set[int]] = {}  # per pattern: nodes an earlier, wider attempt already reported
    for i in range(len(index.nodes) - 1, -1, -1):
        node = index.nodes[i]
        if i in alg.taken or node.domain not in ("", "ai.onnx"):
            continue
        for pattern in by_op.get(node.op_type, ()):
            alg.seen = {i}
            try:
                found = pattern.match(alg, i)
                if found is not None:
                    _check_closed(index, alg, found, stats.cse_shared)
            except NoMatch as exc:
                if i not in explained.get(pattern.name, ()):
                    report.rejections.append(Rejection(pattern.name, node_label(node), node.op_type, str(exc)))
                explained.setdefault(pattern.name, set()).update(alg.seen)
                continue
            if found is not None:
                matches.append(found)
                alg.taken |= found.interior
                break
    if not matches:
        report.nodes_after = len(model.graph.node)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out, report
    _rewrite(work, index, matches, report)
    cleanup.eliminate_dead_code(graph)
    report.nodes_after = len(graph.node)
    try:
        onnx.checker.check_model(work)
    except onnx.checker.ValidationError as exc:
        raise LoweringError(f"internal error: the fused model fails the ONNX checker: {str(exc).splitlines()[0]}") from None
    return work, report


def _check_closed(index: GraphIndex, alg: Algebra, m: Match, cse_shared: set[str]) -> None:
    """The match must own every intermediate it removes and must not overlap an earlier match.

    An intermediate that only became shared because normalization merged identical copies is
    not a real outside use: the copy is re-emitted for the outside users (m.duplicate).
    """
    overlap = (m.interior | m.boundary) & alg.taken
    if overlap:
        raise NoMatch(f"overlaps an earlier fusion at {node_label(index.nodes[min(overlap)])}")
    root = index.producer.get(m.output)
    if root is None or root not in m.interior:
        raise NoMatch("internal: the fused output is not produced inside the match")
    pending = []
    for i in m.interior:
        for name in index.nodes[i].output:
            if name == m.output or not name:
                continue
            if name in index.graph_outputs:
                raise NoMatch(f"intermediate {name} is a graph output")
            if index.is_escaping(name, m.interior):
                user = next(c for c in index.consumers[name] if c not in m.interior)
                if name not in cse_shared:
                    raise NoMatch(f"intermediate {name} is also used by {node_label(index.nodes[user])} outside the match")
                pending.append((i, name, user))
    while pending:
        i, name, user = pending.pop()
        if i in m.duplicate:
            continue
        m.duplicate.add(i)
        for source in index.nodes[i].input:
            j = index.producer.get(source)
            if j is None or j not in m.interior or j in m.duplicate:
                continue
            if source not in cse_shared:
                raise NoMatch(f"intermediate {name} is also used by {node_label(index.nodes[user])} outside the match")
            pending.append((j, source, user))
    produced_inside = {o for i in m.interior for o in index.nodes[i].output}
    for value in m.inputs:
        if isinstance(value, str) and value in produced_inside:
            raise NoMatch(f"internal: input {value} is computed inside the match")


class _Names:
    """Fresh names that collide with nothing in the model."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.used = {n.name for n in graph.node} | {t.name for t in graph.initializer} | {
            v.name for v in itertools.chain(graph.input, graph.output, graph.value_info)} | {
            o for n in graph.node for o in n.output}

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def _rewrite(model: onnx.ModelProto, index: GraphIndex, matches: list[Match], report: FusionReport) -> None:
    """Replaces each match in place. The order stays topological by construction: a fused node
    takes its root's position and reads only values produced before its first matched node, and
    re-emitted intermediates keep their own positions (the checker verifies it afterwards)."""
    graph = model.graph
    names = _Names(graph)
    opset = default_opset(model)
    replacement: dict[int, list[onnx.NodeProto]] = {}
    removed: set[int] = set()
    renamed: dict[str, str] = {}  # outside uses of re-emitted intermediates
    bodies: dict[bytes, str] = {}  # function body -> its overload name
    new_inits: list[onnx.TensorProto] = []
    for count, m in enumerate(sorted(matches, key=lambda m: index.producer[m.output])):
        spec = OP_SPECS[m.op_type]
        node_name = names.fresh(f"{m.op_type}_{count}")
        input_names: list[str] = []
        for formal, value in zip(spec.inputs, m.inputs):
            if isinstance(value, str):
                input_names.append(value)
            else:
                tensor = numpy_helper.from_array(np.asarray(value), names.fresh(f"{node_name}_{formal}"))
                new_inits.append(tensor)
                input_names.append(tensor.name)
        fused = helper.make_node(m.op_type, input_names, [m.output], name=node_name, domain=DOMAIN, **m.attrs)
        body_nodes = [index.nodes[i] for i in sorted(m.interior | m.boundary)]
        function = _function(index, m, body_nodes, input_names, opset)
        key = function.SerializeToString(deterministic=True)
        if key not in bodies:  # identical subgraphs (say, every weight's update) share one function
            function.overload = names.fresh(f"{m.op_type}_f{len(bodies)}")
            bodies[key] = function.overload
            model.functions.append(function)
        fused.overload = bodies[key]
        root = index.producer[m.output]
        replacement[root] = [fused]
        removed |= m.interior
        for i in sorted(m.duplicate):
            copy = onnx.NodeProto()
            copy.CopyFrom(index.nodes[i])
            copy.name = names.fresh(f"{node_label(copy)}_unfused")
            for k, out in enumerate(copy.output):
                renamed[out] = copy.output[k] = names.fresh(f"{out}_unfused")
            replacement[i] = [copy]
        dtype = index.elem_type(m.output)
        report.fusions.append(Fusion(
            pattern=m.pattern, node=node_name, op_type=m.op_type, domain=DOMAIN, output=m.output,
            inputs=input_names, attributes=dict(m.attrs), dtype=DTYPE_NAMES.get(dtype, str(dtype)),
            replaced_nodes=[node_label(index.nodes[i]) for i in sorted(m.interior)], caveats=list(m.caveats)))
    kept: list[onnx.NodeProto] = []
    for i, node in enumerate(index.nodes):
        if i in removed and i not in replacement:
            continue
        for new in replacement.get(i, [node]):
            if new.domain != DOMAIN:
                new.input[:] = [renamed.get(n, n) for n in new.input]
            kept.append(new)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_inits)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    model.ir_version = max(model.ir_version, FUNCTION_IR_VERSION)


def _function(index: GraphIndex, m: Match, nodes: list[onnx.NodeProto], input_names: list[str],
              opset: int) -> onnx.FunctionProto:
    """The matched subgraph as a function over the fused node's formal inputs; values and nodes
    are renamed canonically so that identical subgraphs give identical functions."""
    spec = OP_SPECS[m.op_type]
    rename: dict[str, str] = {}
    for formal, actual in zip(spec.inputs, input_names):
        rename.setdefault(actual, formal)
    rename[m.output] = spec.outputs[0]
    produced = {o for n in nodes for o in n.output}
    constants: list[onnx.NodeProto] = []
    counter = itertools.count()
    body: list[onnx.NodeProto] = []
    for node in nodes:
        for name in node.input:
            if not name or name in rename or name in produced:
                continue
            value = index.const(name)
            if value is None:
                raise LoweringError(f"internal error: a fused {m.op_type} reads {name}, which is neither an input nor a constant")
            rename[name] = f"_c{next(counter)}"
            constants.append(helper.make_node("Constant", [], [rename[name]],
                                              value=numpy_helper.from_array(np.asarray(value), rename[name])))
    for node in nodes:  # definition order, so the names do not depend on the model's names
        for name in node.output:
            if name and name not in rename:
                rename[name] = f"_v{next(counter)}"
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [rename.get(n, n) if n else n for n in node.input]
        copy.output[:] = [rename.get(n, n) if n else n for n in node.output]
        copy.name = ""
        body.append(copy)
    return helper.make_function(DOMAIN, m.op_type, list(spec.inputs), list(spec.outputs), constants + body,
                                [helper.make_opsetid("", opset)])
