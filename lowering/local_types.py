"""Types of values the model does not declare, worked out from their producers on demand.

The pass asks for the types of the few values around its candidates. Where the exporter left a
value's type out, it is inferred here from the node that computes it, and that node's inputs in
turn, as far up as needed and no further: never by shape inference over the whole model, whose
cost (and, with data propagation, memory for every constant it evaluates) grows with the model
rather than with what the pass asks.

Per node: elementwise ops, comparisons, Where, Cast and the like by their broadcasting rule here;
Reshape, Expand and ConstantOfShape from the value of their shape input, which may hold symbolic
dims (Shape -> Gather/Slice/Concat chains of a dynamic batch); every other standard op through
ONNX's own inference for one node (onnx.shape_inference.infer_node_outputs), given the values of
the small integer inputs it reads (Slice starts, Unsqueeze axes). Contrib ops have no ONNX schema:
those whose output has their first input's type by onnxruntime's own schema are listed in
SAME_AS_FIRST_INPUT (onnxruntime-training's Scale), and any other leaves its value unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto

from .onnx_values import Dim, ValueType, attr, constant_node_value, is_complete, tensor_value, type_of_type_proto

# a shape tensor's value: one entry per element, a number, a dim's symbolic name, or unknown
ShapeValue = tuple[Dim, ...]

_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Mod", "PRelu", "BitShift",
                        "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
_COMPARE = frozenset({"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal", "And", "Or", "Xor"})
_SAME = frozenset({"Identity", "Neg", "Abs", "Sign", "Relu", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid",
                   "Floor", "Ceil", "Round", "Erf", "Sin", "Cos", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu",
                   "HardSigmoid", "HardSwish", "Gelu", "Shrink", "Clip", "Softmax", "LogSoftmax", "Dropout",
                   "BitwiseNot"})
# com.microsoft ops whose output 0 has the type and shape of input 0 (onnxruntime's contrib and
# training op schemas give them propagateShapeAndTypeFromFirstInput); the training graphs'
# gradient builder writes Scale for a mean's 1/numel
SAME_AS_FIRST_INPUT = frozenset({("com.microsoft", "Scale"), ("com.microsoft", "FastGeluGrad"),
                                 ("com.microsoft", "BiasGeluGrad_dX"), ("com.microsoft", "BiasFastGeluGrad_dX")})
_MAX_VALUE = 64  # integer tensors up to this many elements are evaluated (shapes, axes, indices)
_MAX_DEPTH = 32  # function calls within calls

Lookup = Callable[[str], ValueType | None]


class NodeLike(Protocol):
    """A NodeProto, or the pass's decoded node (lowering.graph.Node, whose fields read faster and
    which encodes itself with to_proto)."""

    @property
    def op_type(self) -> str: ...

    @property
    def domain(self) -> str: ...

    @property
    def input(self) -> Sequence[str]: ...

    @property
    def output(self) -> Sequence[str]: ...

    @property
    def attribute(self) -> Any: ...


class LocalTypes:
    """Infers the type of a value from its producer, recursively, with each answer kept."""

    def __init__(self, producers: Mapping[str, NodeLike], declared: Lookup,
                 initializers: dict[str, TensorProto], opsets: dict[str, int],
                 functions: dict[tuple[str, str], onnx.FunctionProto], depth: int = 0) -> None:
        self._producers = producers
        self._declared = declared  # the model's own types (complete or not), initializers included
        self._initializers = initializers  # those the user cannot override
        self._opsets = opsets
        self._functions = functions  # the model's local functions, by (domain, name)
        self._depth = depth  # how many function calls deep this body is
        self._types: dict[str, ValueType | None] = {}
        self._values: dict[str, ShapeValue | None] = {}

    def get(self, name: str) -> ValueType | None:
        if name in self._types:
            return self._types[name]
        self._resolve(name)
        return self._types.get(name)

    def _resolve(self, name: str) -> None:
        """Infers `name` after every input of its producer, depth first without recursion (an
        undeclared chain can be as long as the model). A complete declared type is taken as it is."""
        types, producers = self._types, self._producers
        waiting: dict[str, ValueType | None] = {}  # declared types of values whose inputs come first
        stack = [name]
        while stack:
            value = stack[-1]
            if value in types:
                stack.pop()
                continue
            if value in waiting:
                declared = waiting[value]
            else:
                declared = waiting[value] = self._declared(value)
            node = producers.get(value)
            if node is None or is_complete(declared):
                types[value] = declared
                stack.pop()
                continue
            missing = [v for v in node.input if v and v not in types]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            found = self._node_types(node)
            for k, out in enumerate(node.output):
                vt = found[k] if k < len(found) else None
                given = declared if out == value else self._declared(out)
                types[out] = vt if vt is not None and (given is None or _known_dims(vt) > _known_dims(given)) \
                    else given

    def _type(self, name: str) -> ValueType | None:
        return self.get(name) if name else None

    def _node_types(self, node: NodeLike) -> list[ValueType | None]:
        op = node.op_type
        function = self._functions.get((node.domain, op)) if self._functions else None
        if function is not None:
            return self._call_types(node, function)
        if node.domain not in ("", "ai.onnx"):
            return [self._type(node.input[0])] if (node.domain, op) in SAME_AS_FIRST_INPUT and node.input else []
        inputs = [self._type(v) for v in node.input]
        first = inputs[0] if inputs else None
        if op in _BROADCAST or op in _COMPARE or op == "Where":
            shapes = [t.shape if t is not None else None for t in inputs]
            typed = inputs[1] if op == "Where" else first
            if typed is None or any(s is None for s in shapes):
                return [None]
            elem = TensorProto.BOOL if op in _COMPARE else typed.elem_type
            shape = broadcast([s for s in shapes if s is not None])
            if shape == typed.shape and elem == typed.elem_type:
                return [typed]  # most elementwise values have their first input's type: share it
            return [None if shape is None else ValueType(elem, shape)]
        if op in _SAME:
            return [first]
        if op == "Cast":
            to = attr(node, "to")
            return [None if first is None or to is None else ValueType(int(to), first.shape)]
        if op == "CastLike":
            target = inputs[1] if len(inputs) > 1 else None
            return [None if first is None or target is None else ValueType(target.elem_type, first.shape)]
        if op == "Constant":
            return [_constant_type(node)]
        if op in ("Reshape", "Expand", "ConstantOfShape"):
            return [self._shaped(node, inputs)]
        if op == "Shape":
            return [None if first is None or first.shape is None else
                    ValueType(TensorProto.INT64, (len(self._shape_of(node) or ()),))]
        if op == "Size":
            return [ValueType(TensorProto.INT64, ())]
        return self._by_schema(node, inputs)

    def _call_types(self, node: NodeLike, function: onnx.FunctionProto) -> list[ValueType | None]:
        """A call of a model-local function: its body inferred with the call's input types."""
        if self._depth >= _MAX_DEPTH or _has_references(function.node):
            # deeper only in a recursive function, which no valid model has; attribute references
            # (perm=@perm) would be inferred as if unset
            return []
        given = {formal: self._type(actual) for formal, actual in zip(function.input, node.input)}
        opsets = {**self._opsets, **{o.domain: o.version for o in function.opset_import}}
        body = LocalTypes({name: n for n in function.node for name in n.output}, given.get, {}, opsets,
                          self._functions, self._depth + 1)
        return [body.get(name) for name in function.output]

    def _shaped(self, node: NodeLike, inputs: Sequence[ValueType | None]) -> ValueType | None:
        """Reshape, Expand and ConstantOfShape: the output shape from the shape input's value."""
        target = self.value(node.input[-1]) if node.input else None
        if target is None:
            return None
        if node.op_type == "ConstantOfShape":
            tensor = attr(node, "value")
            elem = tensor.data_type if isinstance(tensor, TensorProto) else TensorProto.FLOAT
            return ValueType(elem, target)
        source = inputs[0]
        if source is None or source.shape is None:
            return None
        if node.op_type == "Expand":
            shape = broadcast([source.shape, target])
            return None if shape is None else ValueType(source.elem_type, shape)
        return ValueType(source.elem_type, reshaped(source.shape, target, bool(attr(node, "allowzero", 0))))

    def _by_schema(self, node: NodeLike, inputs: Sequence[ValueType | None]) -> list[ValueType | None]:
        """ONNX's inference for this one node, with the values of its small integer inputs."""
        try:
            schema = onnx.defs.get_schema(node.op_type, self._opsets.get(node.domain or "", 1), node.domain or "")
        except onnx.defs.SchemaError:
            return []
        types: dict[str, onnx.TypeProto] = {}
        data: dict[str, TensorProto] = {}
        for name, vt in zip(node.input, inputs):
            if not name:
                continue
            if vt is None:
                return []
            types[name] = type_proto(vt)
            constant = self._small_constant(name)
            if constant is not None:
                data[name] = constant  # Range's start, limit and delta decide its length
            elif vt.elem_type in (TensorProto.INT64, TensorProto.INT32) and vt.numel is not None:
                value = self.value(name)
                if value is not None and len(value) == vt.numel and all(type(d) is int for d in value):
                    array = np.asarray(value, onnx.helper.tensor_dtype_to_np_dtype(vt.elem_type))
                    data[name] = onnx.numpy_helper.from_array(array.reshape(vt.shape or ()), name)
        try:
            found = onnx.shape_inference.infer_node_outputs(
                schema, _proto(node), types, data,
                opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in self._opsets.items()])
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, KeyError):
            return []
        return [type_of_type_proto(found[out]) if out in found else None for out in node.output]

    def _small_constant(self, name: str) -> TensorProto | None:
        """A constant of at most _MAX_VALUE elements, of any type, as a tensor: an initializer the
        user cannot override, or a Constant node's value."""
        init = self._initializers.get(name)
        if init is not None:
            return init if math.prod(init.dims) <= _MAX_VALUE else None
        node = self._producers.get(name)
        if node is None or node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            return None
        value = constant_node_value(node)
        return None if value is None or value.size > _MAX_VALUE else onnx.numpy_helper.from_array(value, name)

    def _is_vector(self, name: str) -> bool:
        """Whether a value is known to have at most one dimension."""
        vt = self._type(name)
        return vt is not None and vt.shape is not None and len(vt.shape) <= 1

    def _shape_of(self, node: NodeLike) -> ShapeValue | None:
        """Shape(x) with its start and end, as a shape value."""
        vt = self._type(node.input[0])
        if vt is None or vt.shape is None:
            return None
        rank = len(vt.shape)
        start, end = int(attr(node, "start", 0)), attr(node, "end", None)
        stop = rank if end is None else int(end)
        return tuple(vt.shape[slice(max(start + rank, 0) if start < 0 else start,
                                    max(stop + rank, 0) if stop < 0 else stop)])

    def value(self, name: str) -> ShapeValue | None:
        """The flattened value of a small integer tensor: a constant, or computed from shapes by
        the ops exporters use to build one; None where any step is not known."""
        if name in self._values:
            return self._values[name]
        self._values[name] = None  # a cycle (which a valid model has not) ends here
        found = self._value(name)
        self._values[name] = found
        return found

    def _value(self, name: str) -> ShapeValue | None:
        node = self._producers.get(name)
        init = self._initializers.get(name)
        if init is not None:
            return _small_integers(tensor_value(init) if _is_small_integer(init) else None)
        if node is None or node.domain not in ("", "ai.onnx"):
            return None
        op = node.op_type
        if op == "Constant":
            return _small_integers(constant_node_value(node))
        if op == "Shape":
            return self._shape_of(node)
        if op == "Size":
            vt = self._type(node.input[0])
            return None if vt is None or vt.numel is None else (vt.numel,)
        if op in ("Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten"):
            return self.value(node.input[0])
        if op == "Cast":
            to = attr(node, "to")
            return self.value(node.input[0]) if to in (TensorProto.INT64, TensorProto.INT32) else None
        if not all(self._is_vector(v) for v in node.input if v):
            return None  # the values below are flattened: only vectors and scalars combine right
        args = [self.value(v) for v in node.input]
        if op == "Concat":
            return None if any(a is None for a in args) else tuple(d for a in args if a is not None for d in a)
        if op == "Gather" and len(args) == 2 and args[0] is not None and args[1] is not None:
            source, indices = args[0], args[1]
            if int(attr(node, "axis", 0)) != 0 or any(type(i) is not int for i in indices):
                return None
            picked = [int(i) for i in indices if type(i) is int]
            if any(not -len(source) <= i < len(source) for i in picked):
                return None
            return tuple(source[i] for i in picked)
        if op == "Slice" and len(args) >= 3 and all(a is not None for a in args):
            return _sliced(args)
        if op in ("Add", "Sub", "Mul", "Div", "Max", "Min") and len(args) == 2:
            a, b = args
            return None if a is None or b is None else _arithmetic(op, a, b)
        return None


def _has_references(nodes: Sequence[onnx.NodeProto]) -> bool:
    """Whether any attribute of these nodes, or of nodes in their subgraphs, refers to an
    attribute of the function they are in."""
    for node in nodes:
        for a in node.attribute:
            if a.ref_attr_name:
                return True
            graphs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
            if any(_has_references(g.node) for g in graphs):
                return True
    return False


def _constant_type(node: NodeLike) -> ValueType | None:
    """A Constant node's type, read off its attribute: a big tensor is not decoded to learn it."""
    for a in node.attribute:
        if a.name == "value":
            return ValueType(a.t.data_type, tuple(a.t.dims))
    value = constant_node_value(node)  # the scalar and list forms: small
    return None if value is None else ValueType(onnx.helper.np_dtype_to_tensor_dtype(value.dtype), tuple(value.shape))


def _proto(node: NodeLike) -> onnx.NodeProto:
    """The node as a NodeProto; a decoded node normalization changed is encoded anew."""
    proto = node.to_proto() if hasattr(node, "to_proto") else node
    assert isinstance(proto, onnx.NodeProto)
    return proto


def _sliced(args: list[ShapeValue | None]) -> ShapeValue | None:
    source, starts, ends = args[0], args[1], args[2]
    axes = args[3] if len(args) > 3 else (0,)
    steps = args[4] if len(args) > 4 else (1,)
    if source is None or starts is None or ends is None or axes is None or steps is None:
        return None
    numbers = (starts, ends, axes, steps)
    if any(len(a) != 1 or type(a[0]) is not int for a in numbers) or axes[0] not in (0, -1):
        return None
    start, end, step = int(starts[0]), int(ends[0]), int(steps[0])  # type: ignore[arg-type]
    return None if step == 0 else tuple(source[slice(*slice(start, end, step).indices(len(source)))])


def _arithmetic(op: str, a: ShapeValue, b: ShapeValue) -> ShapeValue | None:
    if len(a) != len(b) and 1 not in (len(a), len(b)):
        return None
    n = max(len(a), len(b))
    out: list[Dim] = []
    for x, y in zip(a * n if len(a) == 1 else a, b * n if len(b) == 1 else b):
        if type(x) is not int or type(y) is not int or (op == "Div" and y == 0):
            out.append(None)
            continue
        out.append({"Add": x + y, "Sub": x - y, "Mul": x * y, "Div": int(x / y) if (x < 0) != (y < 0) else x // y,
                    "Max": max(x, y), "Min": min(x, y)}[op])
    return tuple(out)


def broadcast(shapes: Sequence[tuple[Dim, ...]]) -> tuple[Dim, ...] | None:
    """numpy broadcasting of shapes that may hold symbolic or unknown dims; None when two known
    dims cannot broadcast (the node then has no type here, as ONNX gives it none)."""
    if all(s == shapes[0] for s in shapes):
        return tuple(shapes[0]) if shapes else ()
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for k in range(rank):
        dims = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0}
        dims.discard(1)
        numbers = {d for d in dims if type(d) is int}
        if len(numbers) > 1:
            return None
        if numbers:
            out.append(numbers.pop())
        elif not dims:
            out.append(1)
        elif len(dims) == 1:
            out.append(dims.pop())
        else:
            out.append(None)  # two symbols or an unknown dim: equal at run time, but which is not known
    return tuple(out)


def reshaped(source: tuple[Dim, ...], target: ShapeValue, allowzero: bool) -> tuple[Dim, ...]:
    """Reshape's output shape: 0 copies the input's dim (unless allowzero), -1 takes what is left,
    also when symbolic dims of the input are kept by name (x.view(x.shape[0], -1) on a batch n)."""
    dims: list[Dim] = [source[k] if d == 0 and not allowzero and k < len(source) else d for k, d in enumerate(target)]
    if -1 in dims:
        left = list(source)
        known = True
        for d in dims:
            if d == -1 or type(d) is int:
                continue
            if isinstance(d, str) and d in left:
                left.remove(d)  # each occurrence cancels one of the input's
            else:
                known = False  # an unknown dim, or a symbol the input does not hold as often
        rest = math.prod(d for d in dims if type(d) is int and d != -1)
        known = known and all(type(d) is int for d in left)
        dims[dims.index(-1)] = math.prod(d for d in left if type(d) is int) // rest if known and rest else None
    return tuple(None if type(d) is int and d < 0 else d for d in dims)


def type_proto(vt: ValueType) -> onnx.TypeProto:
    return onnx.helper.make_tensor_type_proto(vt.elem_type, None if vt.shape is None else list(vt.shape))


def _is_small_integer(t: TensorProto) -> bool:
    """Checked on the proto, so that no weight is converted to learn it is not a shape."""
    return t.data_type in (TensorProto.INT64, TensorProto.INT32) and math.prod(t.dims) <= _MAX_VALUE


def _small_integers(value: np.ndarray | None) -> ShapeValue | None:
    if value is None or value.dtype.kind not in "iu" or value.size > _MAX_VALUE:
        return None
    return tuple(int(v) for v in value.reshape(-1))




def _known_dims(vt: ValueType) -> int:
    """How much of a shape is known: the rank counts, then each known dim."""
    return -1 if vt.shape is None else 1 + sum(d is not None for d in vt.shape)
