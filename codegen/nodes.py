"""What the lowering rules need to know about one fused node, read out of an onnx.ModelProto.

Rules work on `NodeSpec` (plain data), not on protobufs, so the runtime shim can build one for an
aclnn call without a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from codegen.errors import CodegenError
from contracts.fused_ops import DOMAIN, OP_SPECS
from lowering.graph import may_have_subgraphs

_ONNX_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
}

Dim = int | str | None  # a fixed size, a symbolic name, or unknown


@dataclass(frozen=True)
class InputSpec:
    """One input of the fused node: its dtype, shape (None if unknown) and constant value."""

    dtype: str
    shape: tuple[Dim, ...] | None
    const: float | None = None  # element 0 when the input is a one-element compile-time constant

    def numel(self) -> int | None:
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            return None
        return math.prod(d for d in self.shape if isinstance(d, int))


@dataclass(frozen=True)
class NodeSpec:
    """A fused node as the rules see it; `inputs` is keyed by the contract's input names."""

    name: str  # the model's node name: untrusted text, never used unsanitised
    op_type: str
    inputs: dict[str, InputSpec]
    attrs: dict[str, object] = field(default_factory=dict)


class ModelTables:
    """The model-wide facts node_spec reads (value types, initializer types, constants), built
    once per model: building them per fused node made kernel generation quadratic. Constants are
    converted to numpy only when a fused node reads them.

    The tables of an If/Loop/Scan body (`ModelTables(model, body, parent)`) hold the body's own
    facts and ask the enclosing graph's tables for the outer values the body reads by name."""

    def __init__(self, model: onnx.ModelProto, graph: onnx.GraphProto | None = None,
                 parent: ModelTables | None = None) -> None:
        graph = model.graph if graph is None else graph
        self._parent = parent
        # ValueInfoProto by name (first wins); .type is read only for the values asked about
        self.value_infos: dict[str, onnx.ValueInfoProto] = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            self.value_infos.setdefault(vi.name, vi)
        self.initializers = {t.name: t for t in graph.initializer}
        # initializers that are not graph inputs (a graph input can override them) and Constants
        overridable = {i.name for i in graph.input}
        self._constant_protos = {name: t for name, t in self.initializers.items() if name not in overridable}
        # a body's own values, which hide nothing of the outer scope's (ONNX names are unique) but
        # must not be looked up there
        self._defined = set(self.value_infos) | set(self.initializers) if parent is not None else set()
        for node in graph.node:
            if parent is not None:
                self._defined.update(node.output)
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for a in node.attribute:
                    if a.name == "value":
                        self._constant_protos[node.output[0]] = a.t
        self._constants: dict[str, np.ndarray] = {}

    def _outer(self, name: str) -> ModelTables | None:
        """The enclosing graph's tables when `name` is an outer value of this body."""
        return self._parent if self._parent is not None and name not in self._defined else None

    def value_info(self, name: str) -> onnx.ValueInfoProto | None:
        vi = self.value_infos.get(name)
        outer = self._outer(name) if vi is None or not vi.type.tensor_type.elem_type else None
        return outer.value_info(name) if outer is not None else vi

    def initializer(self, name: str) -> onnx.TensorProto | None:
        init = self.initializers.get(name)
        outer = self._outer(name) if init is None else None
        return outer.initializer(name) if outer is not None else init

    def constant(self, name: str) -> np.ndarray | None:
        if name not in self._constants:
            proto = self._constant_protos.get(name)
            if proto is None:
                outer = self._outer(name)
                return None if outer is None else outer.constant(name)
            self._constants[name] = numpy_helper.to_array(proto)
        return self._constants[name]


def _shape_of(tp: onnx.TypeProto) -> tuple[Dim, ...] | None:
    if not tp.tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in tp.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def _attr_value(a: onnx.AttributeProto) -> object:
    v = onnx.helper.get_attribute_value(a)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _type_name(elem: int) -> str:
    """The ONNX name of an element type, or its number when a model declares one ONNX lacks."""
    try:
        return onnx.TensorProto.DataType.Name(elem)
    except ValueError:
        return f"code {elem} (not an ONNX type)"


def node_spec(model: onnx.ModelProto, node: onnx.NodeProto, tables: ModelTables | None = None) -> NodeSpec:
    """Collect dtypes, shapes, constant scalars and attributes of one fused node; pass the
    model's `tables` when asking about several nodes of one model."""
    if node.domain != DOMAIN or node.op_type not in OP_SPECS:
        raise CodegenError(
            f"node {node.name!r} is {node.domain or 'ai.onnx'}::{node.op_type}, not a fused op "
            f"of {DOMAIN} ({', '.join(OP_SPECS)})"
        )
    spec = OP_SPECS[node.op_type]
    if len(node.input) != len(spec.inputs) or any(not n for n in node.input):
        raise CodegenError(
            f"node {node.name!r}: {node.op_type} takes inputs {', '.join(spec.inputs)}; "
            f"got {len(node.input)}"
        )
    tables = tables or ModelTables(model)
    inputs: dict[str, InputSpec] = {}
    for role, value in zip(spec.inputs, node.input):
        const_value = tables.constant(value)
        vi = tables.value_info(value)
        init = tables.initializer(value)
        if vi is not None and vi.type.tensor_type.elem_type:
            elem = vi.type.tensor_type.elem_type
            shape = _shape_of(vi.type)
        elif init is not None:
            elem, shape = init.data_type, tuple(init.dims)
        elif const_value is not None:
            elem = onnx.helper.np_dtype_to_tensor_dtype(const_value.dtype)
            shape = tuple(const_value.shape)
        else:
            raise CodegenError(
                f"node {node.name!r}: no type known for input {role} (run shape inference)"
            )
        if elem not in _ONNX_DTYPES:
            raise CodegenError(
                f"node {node.name!r}: input {role} has element type "
                f"{_type_name(elem)}; supported: float32, float16, bfloat16"
            )
        const = None
        if const_value is not None and const_value.size == 1:
            const = float(np.asarray(const_value, np.float64).reshape(-1)[0])
        inputs[role] = InputSpec(_ONNX_DTYPES[elem], shape, const)
    attrs = dict(spec.attrs)
    for a in node.attribute:
        attrs[a.name] = _attr_value(a)
    return NodeSpec(node.name, node.op_type, inputs, attrs)


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The fused nodes of the main graph, in graph order."""
    return [n for n in model.graph.node if n.domain == DOMAIN and n.op_type in OP_SPECS]


def scoped_fused_nodes(model: onnx.ModelProto, tables: ModelTables | None = None
                       ) -> list[tuple[onnx.NodeProto, ModelTables]]:
    """The fused nodes of every graph of the model (the main graph, then the If/Loop/Scan bodies
    of each of its nodes, depth first, in graph order), each with the tables of its graph."""
    found: list[tuple[onnx.NodeProto, ModelTables]] = []

    def walk(graph: onnx.GraphProto, here: ModelTables) -> None:
        for node in graph.node:
            if node.domain == DOMAIN and node.op_type in OP_SPECS:
                found.append((node, here))
            if not may_have_subgraphs(node):
                continue
            for a in node.attribute:
                bodies = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
                for body in bodies:
                    if holds_fused_nodes(body):
                        walk(body, ModelTables(model, body, here))

    walk(model.graph, tables or ModelTables(model))
    return found


def holds_fused_nodes(owner: onnx.GraphProto | onnx.NodeProto) -> bool:
    """Whether a graph, or the graph attributes of a node, hold a fused node, directly or in a
    body of their own."""
    if isinstance(owner, onnx.NodeProto):
        return any(holds_fused_nodes(g) for a in owner.attribute
                   for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs))
    for node in owner.node:
        if node.domain == DOMAIN:
            return True
        if may_have_subgraphs(node) and holds_fused_nodes(node):
            return True
    return False
