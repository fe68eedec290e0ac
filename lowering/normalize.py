"""Normalization before matching: one forward sweep over a topologically sorted node list.

Each rule is local and only looks at already-normalized producers, so a single pass in graph
order reaches the fixed point in linear time:
  - constant folding of small (scalar-like) subexpressions, Constant nodes and initializers alike
    (never an initializer that is also a graph input: the user may override it),
  - static Shape/Size of values whose shape is fully known,
  - CastLike with a known target type made a Cast; Identity, same-type casts, x*1, x/1, exact Cast
    round trips (f16->f32->f16) and Gather(Reshape(s, [-1]), 0) of a 0-D s removed; exact ops
    (Abs, Neg, Relu, Max, Min) computed in a wider type and cast back narrowed,
  - canonical operand order: constants second in commutative ops and comparisons,
  - common subexpression elimination, constants included: equal small constants (initializers,
    Constant nodes, folded values) become one, so that the copies of an expression exporters
    write once per use (each with its own constants) merge.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx

from contracts.errors import InternalError

from .graph import (
    EXACT_WIDENING,
    SUBGRAPH_OPS,
    GraphInfo,
    Node,
    ValueType,
    array_key,
    attr,
    captured_names,
    constant_node_value,
    may_have_subgraphs,
    scalar_of_tensor,
    tensor_key,
    tensor_value,
)

FOLD_LIMIT = 64  # largest constant (elements) folding may create: scalars and small vectors only
COMMUTATIVE = {"Add", "Mul", "Max", "Min", "Equal", "And", "Or", "Xor", "Sum", "Mean"}
FLIPPED_COMPARE = {"Less": "Greater", "Greater": "Less", "LessOrEqual": "GreaterOrEqual",
                   "GreaterOrEqual": "LessOrEqual", "Equal": "Equal"}
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                    "Multinomial", "Dropout", "Bernoulli"}
# ops _fold can evaluate: only these are worth looking up constants for
_FOLDABLE_OPS = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Identity", "Neg", "Reciprocal", "Sqrt", "Abs",
                 "Cast", "CastLike"}
EXACT_UNARY = {"Abs", "Neg", "Relu"}  # exact in every float type, so widening around them is a no-op
EXACT_SELECTING = {"Max", "Min"}  # return one of their inputs: exact in every float type too
# standard ops without attributes from opset 9 on (the oldest the pass accepts): their CSE key is
# op and inputs, without reading the node's attributes
ATTRIBUTE_FREE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Abs", "Neg", "Sign", "Reciprocal",
    "Sqrt", "Exp", "Log", "Relu", "Tanh", "Sigmoid", "Floor", "Ceil", "Erf", "Where", "Not", "And", "Or",
    "Xor", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal", "Identity", "Size", "IsNaN"})
# by the cast round-trip, narrowing and scalar-extraction rules
_PRODUCERS_LOOKED_AT = frozenset({"Cast", "Reshape"}) | EXACT_UNARY | EXACT_SELECTING
# rules that apply whatever the inputs are; the others need a constant input
_ALWAYS_VISIT = frozenset({"Constant", "Size", "Shape", "Identity", "Cast", "CastLike"}) | SUBGRAPH_OPS
_CONSTANT_RULE_OPS = (_FOLDABLE_OPS | {"Mul", "Div", "Pow", "Gather", "Min", "Max", "Expand"} | COMMUTATIVE
                      | FLIPPED_COMPARE.keys()) - _ALWAYS_VISIT
# bfloat16 through ml_dtypes, which rounds every result to nearest even as ONNX's Cast and onnxruntime do
_FOLDABLE_DTYPES = {np.dtype(t) for t in ("float32", "float64", "float16", "int32", "int64")} | {
    np.dtype(ml_dtypes.bfloat16)}


@dataclass
class NormalizeStats:
    counts: Counter = field(default_factory=Counter)
    # outputs of nodes that absorbed identical copies: the original graph computed them more
    # than once, so re-emitting one for an outside user adds no work the user did not have
    cse_shared: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def _binary_fold(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    if not _broadcastable(a.shape, b.shape):
        return None  # not a valid node: it stays for the checker or the runtime to say so
    with np.errstate(all="ignore"):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        if op == "Div" and a.dtype.kind == "f":
            return a / b
        if op == "Max":
            return np.maximum(a, b)
        if op == "Min":
            return np.minimum(a, b)
    return None


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x == y or 1 in (x, y) for x, y in zip(reversed(a), reversed(b)))


def _fold(op: str, values: list[np.ndarray], to: int | None = None) -> np.ndarray | None:
    """numpy evaluation with ONNX semantics for the few ops folding handles; None to decline.
    `to` is the target type of Cast/CastLike."""
    if any(v.dtype not in _FOLDABLE_DTYPES for v in values):
        return None
    if len(values) == 2 and values[0].dtype == values[1].dtype:
        return _binary_fold(op, values[0], values[1])
    if len(values) != 1:
        return None
    (v,) = values
    with np.errstate(all="ignore"):
        if op == "Identity":
            return v
        if op == "Neg":
            return -v
        if op == "Reciprocal" and v.dtype.kind == "f":
            return (np.ones((), v.dtype) / v).astype(v.dtype)
        if op == "Sqrt" and v.dtype.kind == "f":
            return np.sqrt(v)
        if op == "Abs":
            return np.abs(v)
        if op in ("Cast", "CastLike"):
            if to in (None, onnx.TensorProto.STRING, onnx.TensorProto.BOOL):
                return None
            try:
                target = onnx.helper.tensor_dtype_to_np_dtype(to)
            except KeyError:  # a `to` ONNX lacks passes the checker: left to fail where it runs
                return None
            if target not in _FOLDABLE_DTYPES:
                return None
            return v.astype(target)
    return None


@dataclass
class Normalized:
    nodes: list[Node]  # the normalized graph, still in topological order
    folded: dict[str, np.ndarray]  # values of the nodes folding replaced (no initializer written yet)
    stats: NormalizeStats


class _Normalizer:
    def __init__(self, nodes: list[Node], info: GraphInfo) -> None:
        self.nodes = nodes
        self.info = info
        self.types = info.types
        self.alias: dict[str, str] = {}
        self.consts: dict[str, np.ndarray] = {}  # small constants known so far
        self._large: set[str] = set()  # initializers too big to fold
        self.folded: dict[str, np.ndarray] = {}
        # folded exact widenings of constants -> the narrower constant they widened
        self.widened_from: dict[str, str] = {}
        # producers of kept Casts and exact unary ops: the only producers the rules look at
        self.producer: dict[str, Node] = {}
        self.cse: dict[tuple, Node] = {}
        self.stats = NormalizeStats()
        # names must stay where a graph output or a subgraph refers to them by name
        self.pinned = info.graph_outputs | captured_names(nodes)
        self._by_value: dict[tuple, str] = {}  # array_key -> the first small constant with that value
        for name, init in info.initializers.items():
            if name not in info.graph_inputs and math.prod(init.dims) <= FOLD_LIMIT:
                self._merge_equal(name, tensor_key(init))

    def resolve(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def const(self, name: str) -> np.ndarray | None:
        value = self.consts.get(name)
        if value is not None or not self.is_const(name):
            return value
        value = self.consts[name] = tensor_value(self.info.initializers[name])
        return value

    def known_const(self, name: str) -> np.ndarray:
        """const(name) for a name is_const has accepted."""
        value = self.const(name)
        if value is None:
            raise InternalError(f"{name} was taken for a constant but has no value")
        return value

    def is_const(self, name: str) -> bool:
        """Whether const(name) gives a value, without converting it (most constants the rules
        look at are never folded, only asked whether they are constants)."""
        if name in self.consts:
            return True
        init = self.info.initializers.get(name)
        if init is None or name in self.info.graph_inputs or name in self._large:
            return False
        # only small initializers can take part in folding; big weights are never read
        if math.prod(init.dims) > FOLD_LIMIT:
            self._large.add(name)
            return False
        return True

    def one(self, name: str) -> np.ndarray | None:
        """The constant at name when it is a single 1 (its dtype matters to the caller)."""
        return self.single(name, 1.0)

    def single(self, name: str, number: float) -> np.ndarray | None:
        """The constant at name when it is one element equal to `number`."""
        if not self.is_const(name):
            return None
        if name not in self.consts:  # a small initializer not read yet: a scalar answers without numpy
            scalar = scalar_of_tensor(self.info.initializers[name])
            if scalar is not None and scalar != number:
                return None
        value = self.known_const(name)
        return value if value.size == 1 and float(value.reshape(-1)[0]) == number else None

    def elem_type(self, name: str) -> int | None:
        vt = self.types.get(name)
        if vt is not None:
            return vt.elem_type
        value = self.const(name)
        return None if value is None else onnx.helper.np_dtype_to_tensor_dtype(value.dtype)

    def _merge_equal(self, name: str, key: tuple) -> bool:
        """Makes `name` an alias of an earlier constant with the same value, if there is one."""
        first = self._by_value.setdefault(key, name)
        if first == name or not self.replace_value(name, first):
            return False
        self.stats.counts["equal constants merged"] += 1
        return True

    def replace_value(self, old: str, new: str) -> bool:
        """Make every use of `old` use `new`; refused for pinned names."""
        if old in self.pinned:
            return False
        self.alias[old] = new
        return True

    def run(self) -> list[Node]:
        kept: list[Node] = []
        alias, producer, consts, initializers = self.alias, self.producer, self.consts, self.info.initializers
        for node in self.nodes:
            if alias:
                for name in node.input:
                    if name in alias:
                        node.rewrite(inputs=tuple(self.resolve(n) for n in node.input))
                        break
            op = node.op_type
            # most nodes of a big graph are standard ops on computed values: only CSE applies
            visit = bool(node.domain) or op in _ALWAYS_VISIT
            if not visit and op in _CONSTANT_RULE_OPS:
                for name in node.input:
                    if name in consts or name in initializers:
                        visit = True
                        break
            if visit:
                keep = self._visit(node)
            else:
                keep = not self._eliminate_common(node)
            if keep:
                kept.append(node)
                if node.op_type in _PRODUCERS_LOOKED_AT:
                    for name in node.output:
                        producer[name] = node
        return kept

    def _visit(self, node: Node) -> bool:
        """Normalizes one node in place; returns False when the node is dropped."""
        if node.domain not in ("", "ai.onnx") or (may_have_subgraphs(node) and any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
        )):
            return True
        op = node.op_type
        if op == "Constant" and len(node.output) == 1:
            value = constant_node_value(node)
            if value is None:
                return True
            if value.size <= FOLD_LIMIT and self._merge_equal(node.output[0], array_key(value)):
                return False
            self.consts[node.output[0]] = value
            return True
        if op in _FOLDABLE_OPS and self._fold_constant(node):
            return False
        if op in ("Size", "Shape") and self._fold_shape(node):
            return False
        if op == "CastLike":
            op = self._cast_like_to_cast(node)
        if op in ("Identity", "Cast", "Mul", "Div", "Pow", "Min", "Max", "Expand") and self._drop_noop(node):
            return False
        if op == "Gather" and self._drop_scalar_extraction(node):
            return False
        if op in COMMUTATIVE or op in FLIPPED_COMPARE:
            self._canonical_order(node)
        return not self._eliminate_common(node)

    def _store_constant(self, node: Node, value: np.ndarray) -> bool:
        name = node.output[0]
        if name in self.pinned:
            return False
        self.stats.counts["constants folded"] += 1
        if not self._merge_equal(name, array_key(value)):
            self.consts[name] = self.folded[name] = value
        return True

    def _fold_constant(self, node: Node) -> bool:
        if len(node.output) != 1 or not node.input or node.op_type in NONDETERMINISTIC:
            return False
        if node.op_type == "CastLike":
            return self._fold_cast_like(node)
        if not all(name and self.is_const(name) for name in node.input):
            return False  # an optional input left empty is not folded either
        values = [self.known_const(name) for name in node.input]
        if any(v.size > FOLD_LIMIT for v in values):  # a big Constant node
            return False
        to = attr(node, "to") if node.op_type == "Cast" else None
        result = _fold(node.op_type, values, to)
        if result is None or result.size > FOLD_LIMIT or not self._store_constant(node, np.asarray(result)):
            return False
        if to is not None and (self.elem_type(node.input[0]), to) in EXACT_WIDENING:
            self.widened_from.setdefault(self.resolve(node.output[0]), node.input[0])
        return True

    def _fold_cast_like(self, node: Node) -> bool:
        """CastLike(constant, x) is a constant of x's dtype (exporters use it for literals)."""
        value = self.const(node.input[0])
        target = self.elem_type(node.input[1]) if len(node.input) == 2 else None
        if value is None or target is None or value.size > FOLD_LIMIT:
            return False
        result = _fold("Cast", [value], target)
        return result is not None and self._store_constant(node, np.asarray(result))

    def _fold_shape(self, node: Node) -> bool:
        if len(node.input) != 1 or any(a.name not in ("start", "end") for a in node.attribute):
            return False
        vt: ValueType | None = self.types.get(node.input[0])
        if vt is None or vt.numel is None or vt.shape is None:  # numel is known only with the shape
            return False
        if node.op_type == "Size":
            return self._store_constant(node, np.array(vt.numel, np.int64))
        # Shape's start/end clamp like a Python slice (opset 15; dynamo writes start=0)
        dims = vt.shape[attr(node, "start", 0):attr(node, "end")]
        return self._store_constant(node, np.array(dims, np.int64))

    def _drop_noop(self, node: Node) -> bool:
        op = node.op_type
        if op == "Identity" and len(node.input) == 1:
            return self._forward(node, node.input[0], "identities removed")
        if op == "Cast" and len(node.input) == 1:
            to = attr(node, "to")
            source = self.elem_type(node.input[0])
            if source == to:
                return self._forward(node, node.input[0], "same-type casts removed")
            inner = self.producer.get(node.input[0])
            if inner is not None and inner.op_type == "Cast" and inner.input:
                origin = self.elem_type(inner.input[0])
                if origin == to and (origin, attr(inner, "to")) in EXACT_WIDENING:
                    return self._forward(node, inner.input[0], "cast round trips removed")
            self._narrow_exact(node, inner, to)
            return False
        if op in ("Mul", "Div") and len(node.input) == 2:
            x, c = node.input
            one = self.one(c)
            if one is None and op == "Mul":
                x, c = c, x
                one = self.one(c)
            if one is not None and self._same_type_after(x, one, node):
                return self._forward(node, x, "multiplications/divisions by 1 removed")
        if op in ("Min", "Max") and len(node.input) == 2:
            # min(x, +inf) and max(x, -inf) are x, NaN included (tf.clip_by_value(d, 0, np.inf)
            # through tf2onnx: Max(Min(d, inf), 0))
            bound = math.inf if op == "Min" else -math.inf
            for x, c in (node.input, node.input[::-1]):
                value = self.single(c, bound)
                if value is not None and value.dtype.kind == "f" and self._same_type_after(x, value, node):
                    return self._forward(node, x, "min(x, inf)/max(x, -inf) removed")
        if op == "Expand" and len(node.input) == 2 and self.is_const(node.input[1]):
            # an Expand to the shape x already has (grappler writes them for a sum's broadcast)
            vt, shape = self.types.get(node.input[0]), self.known_const(node.input[1])
            if (vt is not None and vt.shape is not None and all(isinstance(d, int) for d in vt.shape)
                    and shape.ndim == 1 and tuple(int(d) for d in shape) == tuple(vt.shape)):
                return self._forward(node, node.input[0], "expands to the own shape removed")
        if op == "Pow" and len(node.input) == 2:
            # x**1 is x for every x, NaN and inf included (autograd writes 2 * x**1 for d(x**2));
            # the exponent's type may differ from x's, which Pow's output keeps
            one, vt = self.one(node.input[1]), self.types.get(node.input[0])
            if one is not None and vt is not None and vt.shape is not None and one.ndim <= len(vt.shape):
                return self._forward(node, node.input[0], "powers of 1 removed")
        return False

    def _cast_like_to_cast(self, node: Node) -> str:
        """CastLike(x, like) is Cast(x, to=T(like)) once T is known (dynamo casts runtime scalars
        to their partner's type with it, mostly a no-op), so the Cast rules apply to it."""
        target = self.elem_type(node.input[1]) if len(node.input) == 2 else None
        if target is None:
            return node.op_type
        saturate = [a for a in node.attribute if a.name == "saturate"]
        node.rewrite(op_type="Cast", inputs=node.input[:1],
                     attributes=[onnx.helper.make_attribute("to", target), *saturate])
        return "Cast"

    def _drop_scalar_extraction(self, node: Node) -> bool:
        """Gather(Reshape(s, [-1]), 0) of a 0-D s is s: how dynamo reads a 0-D tensor given where
        a number is expected (torch.add(var, delta, alpha=-lr) with a tensor lr)."""
        if len(node.input) != 2 or attr(node, "axis") not in (None, 0):
            return False
        index = self.const(node.input[1])
        if index is None or index.shape != () or int(index) not in (0, -1):
            return False
        reshape = self.producer.get(node.input[0])
        if reshape is None or reshape.op_type != "Reshape" or len(reshape.input) != 2:
            return False
        shape = self.const(reshape.input[1])
        scalar = self.types.get(reshape.input[0])
        if shape is None or shape.tolist() not in ([-1], [1]) or scalar is None or scalar.shape != ():
            return False
        return self._forward(node, reshape.input[0], "scalar extractions removed")

    def _narrow_exact(self, node: Node, inner: Node | None, to: int) -> None:
        """Cast<T>(U(Cast<W>(x: T), ...)) -> U(x, ...) for the exact ops U = Abs, Neg, Relu, Max,
        Min: exporters widen around Abs for float16, and onnxconverter-common's float16 conversion
        runs every Max and Min in float32 (its default op block list), which hides |x| and the
        clamps from the patterns. An input may also be a constant widened from T, folded.
        onnxruntime's float16 Max/Min differ from its float32 ones only in which zero they return
        for a tie of +0 and -0."""
        if inner is None or inner.domain not in ("", "ai.onnx") or not inner.input:
            return
        if inner.op_type not in EXACT_SELECTING and (inner.op_type not in EXACT_UNARY or len(inner.input) != 1):
            return
        sources = []
        for name in inner.input:
            source = self._narrower(name, to)
            if source is None:
                return
            sources.append(source)
        node.rewrite(op_type=inner.op_type, inputs=tuple(sources), attributes=[])
        self.stats.counts["exact ops narrowed"] += 1

    def _narrower(self, name: str, to: int) -> str | None:
        """The value of type `to` that name exactly widens, if any."""
        widen = self.producer.get(name)
        if widen is not None:
            source = widen.input[0] if widen.op_type == "Cast" and widen.input else None
            if source is None or (to, attr(widen, "to")) not in EXACT_WIDENING:
                return None
        else:
            source = self.widened_from.get(name)
        return source if source is not None and self.elem_type(source) == to else None

    def _same_type_after(self, x: str, one: np.ndarray, node: Node) -> bool:
        """x*1 is x only when the 1 neither broadcasts x to a higher rank nor changes its type."""
        vt = self.types.get(x)
        if vt is None or vt.shape is None or one.ndim > len(vt.shape):
            return False
        out = self.types.get(node.output[0])
        return vt.elem_type == onnx.helper.np_dtype_to_tensor_dtype(one.dtype) and (
            out is None or out.elem_type == vt.elem_type
        )

    def _forward(self, node: Node, source: str, what: str) -> bool:
        if not self.replace_value(node.output[0], source):
            return False
        if source in self.consts:
            self.consts[node.output[0]] = self.consts[source]
        self.stats.counts[what] += 1
        return True

    def _canonical_order(self, node: Node) -> None:
        if len(node.input) != 2:
            return
        a, b = node.input
        if not self.is_const(a) or self.is_const(b):
            return
        if node.op_type in COMMUTATIVE:
            node.rewrite(inputs=(b, a))
        elif node.op_type in FLIPPED_COMPARE:
            node.rewrite(op_type=FLIPPED_COMPARE[node.op_type], inputs=(b, a))
        else:
            return
        self.stats.counts["operands reordered"] += 1

    def _eliminate_common(self, node: Node) -> bool:
        op = node.op_type
        if op in NONDETERMINISTIC or not node.output:
            return False
        for name in node.output:
            if name in self.pinned:
                return False  # never merged, and never the copy others merge into (it is not owned)
        if op in ATTRIBUTE_FREE and not node.domain:
            key: tuple = (op, node.input)
        else:
            attrs = node.attribute
            key = (node.domain, op, node.proto.overload, node.input,
                   tuple(a.SerializeToString(deterministic=True) for a in attrs) if len(attrs) else ())
        first = self.cse.get(key)
        if first is None:
            self.cse[key] = node
            return False
        if len(first.output) != len(node.output):
            return False
        for old, new in zip(node.output, first.output):
            if old:
                self.alias[old] = new
                self.stats.cse_shared.add(new)
        self.stats.counts["common subexpressions merged"] += 1
        return True


def normalize(nodes: list[Node], info: GraphInfo) -> Normalized:
    """Normalizes the main graph's nodes (subgraphs are left as they are). Nodes are changed in
    place (their protos, and so the input model, are not)."""
    norm = _Normalizer(nodes, info)
    kept = norm.run()
    return Normalized(kept, norm.folded, norm.stats)
