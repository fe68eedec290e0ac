"""The pass's view of a model: nodes decoded once into plain Python data, value types read on
demand, and a use-def index (producers, consumers, constants) built once in linear time.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from .local_types import LocalTypes, NodeLike
from .onnx_values import Dim as Dim
from .onnx_values import Shape as Shape
from .onnx_values import ValueType as ValueType
from .onnx_values import attr as attr
from .onnx_values import constant_node_value as constant_node_value
from .onnx_values import is_complete
from .onnx_values import tensor_value as tensor_value
from .onnx_values import type_of_type_proto as type_of_type_proto
from .onnx_values import value_type_of as value_type_of

FLOAT_TYPES: set[int] = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
# widening casts that lose nothing (a cast back undoes them exactly)
EXACT_WIDENING = {
    (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT),
    (onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT),
    (onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE),
    (onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE),
    (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE),
}
DTYPE_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.DOUBLE: "float64",
}


def dtype_name(t: int | None) -> str:
    """The name of a float element type; another type's number, or None when it is unknown."""
    return DTYPE_NAMES.get(t, str(t)) if t is not None else str(t)


_ELEM_TYPES: dict[np.dtype, int] = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.int64): onnx.TensorProto.INT64,
    np.dtype(np.int32): onnx.TensorProto.INT32,
}
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_SCALAR_LAYOUTS: dict[int, tuple[str, str, int]] = {
    onnx.TensorProto.FLOAT: ("float_data", "<f", 4),
    onnx.TensorProto.DOUBLE: ("double_data", "<d", 8),
}


def scalar_of_tensor(t: onnx.TensorProto) -> float | None:
    """A one-element float32/float64 tensor's value without numpy (most fused constants are
    scalars read once, and a numpy round trip costs ten times the read); None: ask numpy."""
    layout = _SCALAR_LAYOUTS.get(t.data_type)
    dims = t.dims
    if (layout is None or (len(dims) and (len(dims) > 1 or dims[0] != 1))
            or t.data_location == onnx.TensorProto.EXTERNAL):
        return None  # shapes like [1, 1] go the numpy way too
    field_name, fmt, size = layout
    data = getattr(t, field_name)
    if len(data) == 1:
        return float(data[0])
    raw = t.raw_data
    return struct.unpack(fmt, raw)[0] if len(raw) == size else None


_NATIVE_SCALARS: dict[int, tuple[str, str]] = {
    onnx.TensorProto.FLOAT: ("float32", "=f"),
    onnx.TensorProto.DOUBLE: ("float64", "=d"),
}


def array_key(value: np.ndarray) -> tuple:
    """A constant's dtype, shape and bytes: equal keys, identical tensors (-0.0 is not 0.0)."""
    return (value.dtype.name, value.shape, value.tobytes())


def tensor_key(t: onnx.TensorProto) -> tuple:
    """array_key of an initializer; a float scalar's without numpy."""
    native = _NATIVE_SCALARS.get(t.data_type)
    if native is not None:
        scalar = scalar_of_tensor(t)
        if scalar is not None:  # its dims are [] or [1]
            return (native[0], (1,) if len(t.dims) else (), struct.pack(native[1], scalar))
    return array_key(tensor_value(t))


def model_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Values the user cannot override: initializers that are not graph inputs, Constant nodes."""
    return graph_constants(model.graph)


def graph_constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """A graph's own true constants (of a body: without those of the enclosing graphs)."""
    graph_inputs = {vi.name for vi in graph.input}
    out = {t.name: tensor_value(t) for t in graph.initializer if t.name not in graph_inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            value = constant_node_value(node)
            if value is not None:
                out[node.output[0]] = value
    return out


class Node:
    """One main-graph node as plain Python data, decoded once from its NodeProto.

    Reading a protobuf field costs about ten times a Python attribute, and every stage of the
    pass reads every node, so op type, domain, inputs and outputs are decoded once. Attributes
    stay in the proto (few nodes have any, and few of those are ever asked); a node the pass
    changes is re-encoded on the way out, an unchanged one is written back as it came.
    """

    __slots__ = ("name", "op_type", "domain", "input", "output", "captures", "proto", "_attribute", "_new_attributes",
                 "changed")

    def __init__(self, proto: onnx.NodeProto, name: str, op_type: str, domain: str, inputs: tuple[str, ...],
                 outputs: tuple[str, ...]) -> None:
        self.proto = proto
        self.name = name
        self.op_type = op_type
        self.domain = domain
        self.input = inputs
        self.output = outputs
        self.captures: tuple[str, ...] = ()  # outer values its subgraphs read by name
        self._attribute: list[onnx.AttributeProto] | None = None
        self._new_attributes = False
        self.changed = False

    @property
    def attribute(self):
        if self._attribute is None:
            self._attribute = self.proto.attribute
        return self._attribute

    def rewrite(self, *, op_type: str | None = None, inputs: tuple[str, ...] | None = None,
                attributes: list[onnx.AttributeProto] | None = None) -> None:
        if op_type is not None:
            self.op_type = op_type
        if inputs is not None:
            self.input = inputs
        if attributes is not None:
            self._attribute = attributes
            self._new_attributes = True
        self.changed = True

    def to_proto(self) -> onnx.NodeProto:
        if not self.changed:
            return self.proto
        out = onnx.NodeProto()
        out.CopyFrom(self.proto)
        out.op_type = self.op_type
        out.input[:] = self.input
        out.output[:] = self.output
        if self._new_attributes:
            del out.attribute[:]
            out.attribute.extend(self._attribute)
        return out


def node_label(node: Node | onnx.NodeProto) -> str:
    """How reports name a node: its name, or its op type and first output when it has none."""
    return node.name or f"{node.op_type} -> {node.output[0] if node.output else '?'}"


def decode_nodes(graph: onnx.GraphProto) -> list[Node]:
    # slicing a repeated string field into a list is about twice as fast as iterating it
    nodes = [Node(p, p.name, p.op_type, p.domain, tuple(p.input[:]), tuple(p.output[:])) for p in graph.node]
    for node in nodes:
        if node.domain or node.op_type in SUBGRAPH_OPS:
            node.captures = tuple(sorted(subgraph_inputs(node)))
    return nodes




class ValueTypes:
    """Types of the values of one model, from its value_info; a value the model types only in
    part, or not at all, is inferred from its producers (lowering.local_types), as far up the
    graph as that value needs: exporters usually write every type, and inference over a whole
    big model costs as much as the rest of the pass."""

    def __init__(self, model: onnx.ModelProto, initializers: dict[str, onnx.TensorProto]) -> None:
        self._model = model
        graph = model.graph
        infos = graph.value_info[:]  # a list iterates faster than the repeated field
        self.declared = dict(zip([vi.name for vi in infos], infos))  # the graph's own value_info
        self._signature = {vi.name: vi for field in (graph.output, graph.input) for vi in field}
        self._initializers = initializers
        self._cache: dict[str, ValueType | None] = {}
        self._parsed: dict[bytes, ValueType | None] = {}
        self._local: LocalTypes | None = None
        self._nodes: list[Node] | None = None
        self.inferred: set[str] = set()  # values whose type came from inference

    def attach(self, nodes: list[Node]) -> None:
        """The model's nodes, decoded: inference, if a type is ever missing, then finds producers
        without reading the protos."""
        self._nodes = nodes

    def get(self, name: str) -> ValueType | None:
        if name in self._cache:
            return self._cache[name]
        vt = self._lookup(name)
        if not is_complete(vt):
            found = self._locally().get(name)
            if found is not None and found is not vt:
                vt = found
                self.inferred.add(name)
        self._cache[name] = vt
        return vt

    def value_info(self, name: str) -> onnx.ValueInfoProto | None:
        """The ValueInfoProto behind get(name): the model's own, or one made from the inferred type."""
        vt = self.get(name)
        if name in self.inferred and vt is not None:
            return onnx.helper.make_tensor_value_info(name, vt.elem_type, None if vt.shape is None else list(vt.shape))
        return self._given(name)

    def _locally(self) -> LocalTypes:
        if self._local is None:
            nodes: list[Node] | list[onnx.NodeProto] = self._nodes or list(self._model.graph.node)
            producers: dict[str, NodeLike] = {name: node for node in nodes for name in node.output}
            overridable = {vi.name for vi in self._model.graph.input}
            opsets = {o.domain: o.version for o in self._model.opset_import}
            functions = {(f.domain, f.name): f for f in self._model.functions}
            self._local = LocalTypes(producers, self._lookup,
                                     {k: t for k, t in self._initializers.items() if k not in overridable}, opsets,
                                     functions)
        return self._local

    def _given(self, name: str) -> onnx.ValueInfoProto | None:
        """The model's own type for a value: graph inputs and outputs first, then value_info."""
        return self._signature.get(name) or self.declared.get(name)

    def _lookup(self, name: str) -> ValueType | None:
        vi = self._given(name)
        vt = None
        if vi is not None:
            # most values of a model share a few types; their bytes are cheaper than a parse
            key = vi.type.SerializeToString()
            vt = self._parsed.get(key)
            if vt is None:
                vt = self._parsed[key] = value_type_of(vi)
        if vt is None and name in self._initializers:
            t = self._initializers[name]
            vt = ValueType(t.data_type, tuple(t.dims))
        return vt


class GraphInfo:
    """What the pass needs to know of a model besides its nodes: graph inputs and outputs,
    initializers, value types. Read once; the input model is never modified."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.graph_inputs = {vi.name for vi in graph.input}
        self.graph_outputs = {vi.name for vi in graph.output}
        self.initializers = {t.name: t for t in graph.initializer}
        self.types = ValueTypes(model, self.initializers)


def captured_names(nodes: list[Node]) -> set[str]:
    """Outer values read by name inside the subgraphs of If/Loop/Scan (and custom) nodes."""
    return {name for node in nodes if node.captures for name in node.captures}


class GraphIndex:
    """Producers, consumers, constants and types of every value of one node list."""

    def __init__(self, nodes: list[Node], info: GraphInfo, folded: dict[str, np.ndarray] | None = None) -> None:
        self.nodes = nodes
        self.info = info
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = defaultdict(list)
        self.by_op: dict[str, list[int]] = defaultdict(list)  # positions of each op type, in order
        producer, consumers, by_op = self.producer, self.consumers, self.by_op
        for i, node in enumerate(nodes):
            by_op[node.op_type].append(i)
            for name in node.output:
                producer[name] = i
            for name in node.input:
                consumers[name].append(i)
            # values captured by a subgraph are used there; count the node as their consumer
            for name in node.captures:
                consumers[name].append(i)
        producer.pop("", None)
        consumers.pop("", None)
        self.graph_inputs = info.graph_inputs
        self.graph_outputs = info.graph_outputs
        self.initializers = info.initializers
        self.folded = folded or {}  # constants normalization computed (no initializer exists yet)
        self.dead: set[int] = set()  # positions of nodes nothing depends on (lowering.cleanup.drop_dead)
        self._const_cache: dict[str, np.ndarray | None] = {}
        self._scalar_cache: dict[str, float | None] = {}
        self._elem_cache: dict[str, int | None] = {}

    def node_of(self, name: str) -> Node | None:
        i = self.producer.get(name)
        return None if i is None else self.nodes[i]

    def may_be_const(self, name: str) -> bool:
        """Whether const(name) can be a value, without reading one: the pre-checks of patterns
        ask this of every node of a kind, most of which read computed values."""
        i = self.producer.get(name)
        if i is not None:
            return self.nodes[i].op_type == "Constant"
        return name in self.initializers or name in self.folded

    def const(self, name: str) -> np.ndarray | None:
        """Value of a true constant: a Constant node or an initializer the user cannot override."""
        if name in self._const_cache:
            return self._const_cache[name]
        value: np.ndarray | None = self.folded.get(name)
        if value is None and name in self.initializers and name not in self.graph_inputs:
            value = tensor_value(self.initializers[name])
        elif value is None:
            node = self.node_of(name)
            if node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = constant_node_value(node)
        self._const_cache[name] = value
        return value

    def const_tensor(self, name: str) -> onnx.TensorProto:
        """A constant as a TensorProto (for function bodies), without a numpy round trip when
        the model already stores it as one."""
        init = self.initializers.get(name)
        if name not in self.folded and init is not None and name not in self.graph_inputs:
            return init
        node = self.node_of(name)
        if name not in self.folded and node is not None and node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return a.t
        value = self.const(name)
        if value is None:
            raise KeyError(name)
        return numpy_helper.from_array(np.asarray(value), name)

    def scalar(self, name: str) -> float | None:
        """A one-element floating or integer constant as a float, else None."""
        cache = self._scalar_cache
        if name in cache:
            return cache[name]
        init = self.initializers.get(name)
        if init is not None and name not in self.graph_inputs and name not in self.folded:
            s = scalar_of_tensor(init)
            if s is not None:
                cache[name] = s
                return s
        value = self.const(name)
        # bfloat16's kind is "V"
        numeric = value is not None and (value.dtype.kind in "fiu" or value.dtype == _BFLOAT16)
        s = float(value.reshape(-1)[0]) if value is not None and numeric and value.size == 1 else None
        cache[name] = s
        return s

    def is_overridable_initializer(self, name: str) -> bool:
        return name in self.initializers and name in self.graph_inputs

    def type_of(self, name: str) -> ValueType | None:
        return self.info.types.get(name)

    def _constant_value(self, name: str) -> np.ndarray | None:
        """A folded constant or a Constant node's value; initializers are read by the callers
        from their protos (a weight is never converted just to learn its type)."""
        value = self.folded.get(name)
        if value is None:
            i = self.producer.get(name)
            if i is not None and self.nodes[i].op_type == "Constant":
                value = self.const(name)
        return value

    def elem_type(self, name: str) -> int | None:
        """Constants answer from their own value, so no type lookup (which may infer types from
        producers) is made for them. Cached: the patterns ask about the same few values often."""
        cache = self._elem_cache
        if name in cache:
            return cache[name]
        value = self._constant_value(name)
        t: int | None
        if value is not None:
            t = _ELEM_TYPES.get(value.dtype) or onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        elif (init := self.initializers.get(name)) is not None:
            t = init.data_type
        else:
            vt = self.info.types.get(name)
            t = None if vt is None else vt.elem_type
        cache[name] = t
        return t

    def numel(self, name: str) -> int | None:
        value = self._constant_value(name)
        if value is not None:
            return int(value.size)
        init = self.initializers.get(name)
        if init is not None:
            return math.prod(init.dims)
        vt = self.info.types.get(name)
        return None if vt is None else vt.numel

    def is_escaping(self, name: str, inside: set[int]) -> bool:
        """True when a value is a graph output or feeds a node outside `inside`."""
        if name in self.graph_outputs:
            return True
        return any(c not in inside for c in self.consumers.get(name, ()))


SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
# the ops whose graph attributes are bodies the pass fuses in (lowering.subgraphs), and those attributes
OWNERS: dict[str, tuple[str, ...]] = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}


def owns_bodies(node: onnx.NodeProto) -> bool:
    return node.op_type in OWNERS and node.domain in ("", "ai.onnx")


def has_bodies(graph: onnx.GraphProto) -> bool:
    return any(owns_bodies(n) for n in graph.node)


def body_label(node: onnx.NodeProto, attribute: str) -> str:
    """How reports name a body (the pass's and the diff's): its node's name, or its op type and
    first output, then the attribute: "Loop_3/body", "If(y)/then_branch"."""
    owner = node.name or f"{node.op_type}({node.output[0] if node.output else '?'})"
    return f"{owner}/{attribute}"


def may_have_subgraphs(node: Node | onnx.NodeProto) -> bool:
    """Cheap test before scanning attributes: only these ops (and custom ones) carry graphs."""
    return node.op_type in SUBGRAPH_OPS or node.domain not in ("", "ai.onnx")


def subgraph_inputs(node: Node | onnx.NodeProto) -> set[str]:
    """Outer-scope values that the subgraphs of an If/Loop/Scan node read by name."""
    names: set[str] = set()
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            names |= outer_names_used(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            for g in a.graphs:
                names |= outer_names_used(g)
    return names


def outer_names_used(graph: onnx.GraphProto) -> set[str]:
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        defined.update(node.output)
        for name in node.input:
            if name and name not in defined:
                used.add(name)
        used |= subgraph_inputs(node) - defined
    for vi in graph.output:
        if vi.name not in defined:
            used.add(vi.name)
    return used
