"""Fusion inside the bodies of If, Loop and Scan nodes, nested to any depth.

Iterative solvers (ISTA, FISTA, unrolled LISTA, optimizer loops) put the proximal update in a loop
body and conditional training steps put it in a branch, where a pass over the main graph never
looks. Each body is fused as a graph of its own, by the same pass (`run`) with the same rules:
the body is made into a model whose graph inputs are its formal inputs and the outer values it
reads by name (runtime values, leaves of every match, so a match never crosses the body's
boundary), with the outer scope's true constants as its initializers. Formal inputs the body
leaves untyped get the types lowering.body_types works out (a loop-carried value whose shape is
invariant takes its initial value's). The result is spliced back into the body: its nodes, its
own initializers and value_info, and the worked-out types of its formal inputs; the outer values
keep their names, so a fused node reads a captured value as the matched nodes did, and the
carried values keep their roles. The fused nodes' functions go to the model's functions.

All graphs of a model share one Naming, so fused nodes, function overloads and new values have
names unique in the whole model, and each fusion and near miss records the graph it is in
("Loop_3/body", "Loop_3/body/If_1/then_branch").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import onnx
from onnx import helper, numpy_helper

from contracts.fused_ops import DOMAIN, DOMAIN_VERSION

from .body_types import FormalTypes, formal_types
from .graph import OWNERS, GraphInfo, body_label, has_bodies, outer_names_used, owns_bodies
from .onnx_values import ValueType, constant_node_value
from .report import FusionReport

FUNCTION_IR_VERSION = 10  # node/function `overload` needs IR version 10


@dataclass
class Naming:
    """Names shared by the passes over the graphs of one model. What the model's bodies hold is
    read only once the main graph's pass has seen it has bodies (`see`): a model without any
    pays nothing for them."""

    model: onnx.ModelProto
    reserved: set[str] = field(default_factory=set)  # names of every graph, and those the passes made
    overloads: set[tuple[str, str]] | None = None  # (op type, overload) of the fused ops' functions
    fused: int = 0  # fused nodes named so far (they are numbered across the model)
    bodies: bool | None = None  # whether the main graph has If/Loop/Scan bodies, once seen

    def see(self, op_types: Iterable[str]) -> None:
        """Told the op types of the main graph's nodes by its pass, before it names anything."""
        if self.bodies is not None:
            return
        self.bodies = any(op in OWNERS for op in op_types) and has_bodies(self.model.graph)
        if self.bodies:
            _all_names(self.model.graph, self.reserved)
            self.overloads = {(f.name, f.overload) for f in self.model.functions if f.domain == DOMAIN}


Run = Callable[[onnx.ModelProto, Naming], tuple[onnx.ModelProto, FusionReport]]


def _all_names(graph: onnx.GraphProto, into: set[str]) -> None:
    stack = [graph]
    while stack:
        g = stack.pop()
        into.update(vi.name for field_ in (g.input, g.output, g.value_info) for vi in field_)
        into.update(t.name for t in g.initializer)
        for n in g.node:
            into.add(n.name)
            into.update(n.output)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(a.graphs)
    into.discard("")


def fuse_with_subgraphs(model: onnx.ModelProto, run: Run) -> tuple[onnx.ModelProto, FusionReport]:
    """`run` on the main graph, then on every If/Loop/Scan body, nested ones included."""
    naming = Naming(model)
    context = _Context(run, naming, model, [f for f in model.functions if f.domain != DOMAIN])
    fused, report, functions = context.fuse(model, "", {}, frozenset())
    if functions:
        fused.functions.extend(functions)
        if not any(o.domain == DOMAIN for o in fused.opset_import):
            fused.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
        fused.ir_version = max(fused.ir_version, FUNCTION_IR_VERSION)
    return fused, report


@dataclass
class _Body:
    """A body made into a model for the pass, and what splicing the result back needs."""

    model: onnx.ModelProto
    captured_constants: set[str]  # outer constants the model holds as initializers
    captured: set[str]  # every outer value the body reads
    formal: FormalTypes
    undeclared: frozenset[str]  # outer values it reads whose type the model nowhere declares


@dataclass
class _Context:
    run: Run
    naming: Naming
    top: onnx.ModelProto
    functions: list[onnx.FunctionProto]  # the model's own local functions (calls are typed through them)
    opsets: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.opsets = {o.domain: o.version for o in self.top.opset_import}

    def fuse(self, model: onnx.ModelProto, path: str, constants: dict[str, onnx.TensorProto],
             undeclared: frozenset[str]) -> tuple[onnx.ModelProto, FusionReport, list[onnx.FunctionProto]]:
        """The pass on one graph (`model`, at `path`), then on its bodies; returns the fused model,
        the report of the whole tree and the fused ops' functions made (not yet in any model).
        `constants`: the true constants of the enclosing graphs; `undeclared`: the values visible
        here whose type the model does not declare."""
        known = len(model.functions)
        fused, report = self.run(model, self.naming)
        made = list(fused.functions[known:])
        del fused.functions[known:]
        for fusion in report.fusions:
            fusion.graph = path
        for rejection in report.rejections:
            rejection.graph = path
        if not self.naming.bodies or not has_bodies(fused.graph):
            return fused, report, made
        info = GraphInfo(model)
        visible = dict(constants)
        visible.update(_constants(model.graph))
        for node in fused.graph.node:
            if not owns_bodies(node):
                continue
            for a in node.attribute:
                if a.name not in OWNERS[node.op_type] or a.type != onnx.AttributeProto.GRAPH:
                    continue
                where = f"{path}/{body_label(node, a.name)}" if path else body_label(node, a.name)
                body = self._body(node, a.g, info, visible, undeclared)
                sub, sub_report, sub_made = self.fuse(body.model, where, visible, body.undeclared)
                _note_unknown(sub_report, body.formal, where)
                if sub_made or sub_report.fusions:
                    _splice(a.g, body, sub)
                    made += sub_made
                _merge(report, sub_report)
        return fused, report, made

    def _body(self, node: onnx.NodeProto, body: onnx.GraphProto, info: GraphInfo,
              constants: dict[str, onnx.TensorProto], undeclared: frozenset[str]) -> _Body:
        outer = info.types
        formal = formal_types(node, body, outer.get, self.opsets,
                              {(f.domain, f.name): f for f in self.functions})
        captured = outer_names_used(body)
        model = onnx.ModelProto(ir_version=self.top.ir_version)
        model.opset_import.extend(self.top.opset_import)
        model.functions.extend(self.functions)
        graph = model.graph
        graph.name = body.name
        graph.input.extend(_typed(vi, formal.types) for vi in body.input)
        held: set[str] = set()
        reads_undeclared: set[str] = set()
        for name in sorted(captured):
            if name in constants:
                tensor = graph.initializer.add()
                tensor.CopyFrom(constants[name])
                tensor.name = name
                held.add(name)
                continue
            vt = outer.get(name)
            graph.input.append(_value_info(name, vt))
            if name in undeclared or name in outer.inferred:
                reads_undeclared.add(name)
        graph.initializer.extend(body.initializer)
        graph.node.extend(body.node)
        graph.value_info.extend(body.value_info)
        graph.output.extend(_typed(vi, formal.types) for vi in body.output)
        return _Body(model, held, captured, formal, frozenset(reads_undeclared))


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """A graph's true constants (initializers that are not graph inputs, Constant nodes) as tensors."""
    inputs = {vi.name for vi in graph.input}
    out = {t.name: t for t in graph.initializer if t.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            tensor = next((a.t for a in node.attribute if a.name == "value"), None)
            if tensor is None:
                value = constant_node_value(node)
                tensor = None if value is None else numpy_helper.from_array(value)
            if tensor is not None:
                out[node.output[0]] = tensor
    return out


def _value_info(name: str, vt: ValueType | None) -> onnx.ValueInfoProto:
    if vt is None:
        return onnx.ValueInfoProto(name=name)
    return helper.make_tensor_value_info(name, vt.elem_type, None if vt.shape is None else list(vt.shape))


def _typed(vi: onnx.ValueInfoProto, types: dict[str, ValueType]) -> onnx.ValueInfoProto:
    vt = types.get(vi.name)
    if vt is None:
        return vi
    out = _value_info(vi.name, vt)
    out.doc_string = vi.doc_string
    return out


def _splice(target: onnx.GraphProto, body: _Body, fused: onnx.ModelProto) -> None:
    """Writes the fused body model back into the body graph `target`."""
    graph = fused.graph
    del target.node[:]
    target.node.extend(graph.node)
    del target.initializer[:]
    target.initializer.extend(t for t in graph.initializer if t.name not in body.captured_constants)
    del target.value_info[:]
    target.value_info.extend(vi for vi in graph.value_info if vi.name not in body.captured)
    # the type a fused node's captured input has, where the model declares it nowhere, for the
    # fused model to be lowered on its own (codegen reads it in the scope of the body)
    reads = {name for n in graph.node if n.domain == DOMAIN for name in n.input}
    target.value_info.extend(vi for vi in graph.input if vi.name in body.undeclared and vi.name in reads
                             and vi.type.HasField("tensor_type"))
    worked_out = body.formal.worked_out
    for field_ in (target.input, target.output):
        for k, vi in enumerate(field_):
            if vi.name in worked_out:
                field_[k].CopyFrom(_typed(vi, body.formal.types))


def _note_unknown(report: FusionReport, formal: FormalTypes, where: str) -> None:
    """Near misses in a body whose formal inputs' shapes could not be worked out say which and why."""
    if not formal.unknown:
        return
    for r in report.rejections:
        named = [name for name in sorted(formal.unknown) if name in r.reason]
        if r.graph == where and named:
            r.reason += "".join(f" ({name}: {formal.unknown[name]})" for name in named)


def _merge(report: FusionReport, sub: FusionReport) -> None:
    report.fusions += sub.fusions
    report.rejections += sub.rejections
    for key, count in sub.normalization.items():
        report.normalization[key] = report.normalization.get(key, 0) + count
    report.nodes_before += sub.nodes_before
    report.nodes_after += sub.nodes_after
