"""Candidate regions: the elementwise subgraph that computes one value from chosen tensor inputs.

A region starts at its output and walks back through elementwise nodes. It stops at the chosen
tensors (predict and label, or var and delta), at constants (uniform fills such as
ConstantOfShape(Shape(x)) count as their one value), at values that compute a tensor's element
count (Size, ReduceProd(Shape)), and at every value that does not depend on the chosen tensors:
such a value is a leaf the fused node reads as it is (dout, a runtime step size, 1 + lr*l2 computed
upstream), which is sound whatever it holds, since the proof draws it at random.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...algebra import Algebra
from ...algebra.local_shapes import shape_of, uniform_fill
from ...graph import GraphIndex, attr
from ..base import fill, within_shape
from .evaluate import ELEMENTWISE

# ops whose presence makes a function piecewise: the places the two fused functions kink
KINKS = frozenset({"Abs", "Sign", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Clip", "Min", "Max",
                   "Relu", "Shrink"})
_NUMEL_OPS = frozenset({"Size", "ReduceProd", "Cast", "Mul", "Squeeze", "Reshape", "Gather"})
_FOLLOWED = ELEMENTWISE | _NUMEL_OPS  # the ops a dependence is traced through
MAX_NODES = 64  # the largest region evaluated; the spellings seen so far use under 30 nodes
MAX_RUNTIME_LEAVES = 6  # dout, or alpha, l1, l2 and the values computed from them, with room to spare


@dataclass
class Region:
    output: str
    nodes: list[int]  # positions of the evaluated nodes, in graph (topological) order
    tensors: tuple[str, ...]  # the chosen tensor inputs
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # leaf -> its value (a fill: one element)
    numels: dict[str, str] = field(default_factory=dict)  # leaf -> tensor whose element count it holds
    scalars: list[str] = field(default_factory=list)  # runtime leaves of one element
    others: list[str] = field(default_factory=list)  # runtime leaves of more (or an unknown number of) elements
    boundary: set[int] = field(default_factory=set)  # fill and numel nodes: kept in the graph, copied into the body
    side: set[int] = field(default_factory=set)  # numel nodes that read a computed value: replaced with the region
    # math that does not read the tensors: on constants (a broadcast 1/n negated) or, with
    # open_scalars, on runtime scalars (1 + lr * l2); kept in the graph, copied into the body
    independent: set[int] = field(default_factory=set)


class RegionRefused(Exception):
    """The walk met something a region cannot hold; the message says what."""


class Either:
    """Membership in either of two sets, without building their union."""

    def __init__(self, a: set[int], b: set[int]) -> None:
        self.a, self.b = a, b

    def __contains__(self, i: object) -> bool:
        return i in self.a or i in self.b


class Walks:
    """What the walks of one difference's regions learn and share: which values depend on
    which chosen tensors, which are constant-valued. Valid while alg.taken does not change."""

    def __init__(self, alg: Algebra, taken: set[int] | Either) -> None:
        self.alg = alg
        self.taken = taken
        self._depends: dict[tuple[str, ...], _Dependence] = {}
        self._constant: dict[str, _ConstantValued] = {}

    def depends(self, tensors: tuple[str, ...]) -> _Dependence:
        found = self._depends.get(tensors)
        if found is None:
            found = self._depends[tensors] = _Dependence(self.alg.index, tensors, self.taken)
        return found

    def constant(self, like: str) -> _ConstantValued:
        found = self._constant.get(like)
        if found is None:
            found = self._constant[like] = _ConstantValued(self.alg, like, self.taken)
        return found


def build(walks: Walks, output: str, tensors: tuple[str, ...], open_scalars: bool = False,
          open_all: bool = False) -> Region:
    """The region computing `output` from `tensors` (see the module docstring). With
    `open_scalars`, one-element elementwise math that does not depend on the tensors is evaluated
    too (independent), down to the runtime scalars it reads: the proximal binding then finds
    alpha, l1 and l2 among them or the values computed from them. With `open_all`, every such
    elementwise value is: a cotangent read twice (-ct and ct * c) is then one leaf."""
    return build_joint(walks, [output], tensors, open_scalars, open_all)


def build_joint(walks: Walks, outputs: list[str], tensors: tuple[str, ...], open_scalars: bool = False,
                open_all: bool = False, max_nodes: int = MAX_NODES, max_leaves: int = MAX_RUNTIME_LEAVES) -> Region:
    """One region computing every one of `outputs` (the first is its output): each node is
    decided as in build, whichever output reaches it, so the joint region evaluates every output
    as its own region would."""
    alg, taken = walks.alg, walks.taken
    index = alg.index
    output = outputs[0]
    ends = set(outputs)
    region = Region(output, [], tensors)
    depends = walks.depends(tensors)
    constant_valued = walks.constant(tensors[0])
    nodes: set[int] = set()
    seen: set[str] = set()
    stack = list(outputs)
    while stack:
        value = stack.pop()
        if value in seen or value in tensors or not value:
            continue
        seen.add(value)
        const = index.const(value)
        if const is not None:
            region.constants[value] = _uniform(index, const, value, tensors[0])
            continue
        i = index.producer.get(value)
        if i is None or i in taken:
            _read_at_runtime(index, region, value, max_leaves)
            continue
        node = index.nodes[i]
        if node.op_type in _NUMEL_OPS and value not in ends:
            numel = alg.numel_of(value)
            if numel is not None:
                region.numels[value] = numel[0]
                (region.boundary if numel[0] in tensors or not depends(numel[0]) else region.side).update(numel[1])
                continue
        if node.op_type in ("ConstantOfShape", "Expand"):
            filled = fill(alg, value, tensors[0]) or _expanded_constant(index, i, tensors[0]) \
                or _fill_shaped_like(alg, i, depends) or _fill_by_shape_arithmetic(index, value, tensors)
            if filled is not None:
                region.constants[value] = np.asarray(filled[0], np.float64)
                region.boundary |= filled[1]
                continue
        if node.op_type not in ELEMENTWISE or node.domain not in ("", "ai.onnx"):
            _read_at_runtime(index, region, value, max_leaves)
            continue
        if value not in ends and not depends(value):
            if not open_all and not (open_scalars and index.numel(value) == 1) and not constant_valued(value):
                (region.scalars if index.numel(value) == 1 else region.others).append(value)
                continue
            region.independent.add(i)
        nodes.add(i)
        if len(nodes) > max_nodes:
            raise RegionRefused(f"the elementwise region is larger than {max_nodes} nodes")
        stack.extend(node.input)
    region.nodes = sorted(nodes)
    return region


def _read_at_runtime(index: GraphIndex, region: Region, value: str, limit: int) -> None:
    """`value` becomes a leaf the region reads at runtime: a scalar or another tensor."""
    (region.scalars if index.numel(value) == 1 else region.others).append(value)
    if len(region.scalars) + len(region.others) > limit:
        raise RegionRefused(f"reads more than {limit} runtime values")


def _uniform(index: GraphIndex, const: np.ndarray, name: str, like: str) -> np.ndarray:
    """A constant as its one value: one element, or one value repeated in a shape that leaves
    `like`'s as it is when broadcast (JAX writes zeros and ones of the full shape)."""
    if const.size == 1:
        return const.reshape(())
    flat = const.reshape(-1)
    if const.size and (flat == flat[0]).all():
        if within_shape(index, tuple(const.shape), like):
            return flat[0].reshape(())
        raise RegionRefused(f"reads the constant {name} of shape {list(const.shape)}, which may broadcast the result")
    raise RegionRefused(f"reads the constant tensor {name} of {const.size} different elements")


def _fill_shaped_like(alg: Algebra, i: int, depends: _Dependence) -> tuple[float, set[int]] | None:
    """fill's (v, nodes) for a fill of Shape(u) where u is computed from the chosen tensors: u's
    shape is part of the region's own, so the fill cannot broadcast the result any further."""
    index = alg.index
    shape = alg.producer(index.nodes[i].input[-1], "Shape")
    if shape is None or attr(shape[1], "start") or attr(shape[1], "end") is not None \
            or not depends(shape[1].input[0]):
        return None
    node = index.nodes[i]
    if node.op_type == "ConstantOfShape":
        return fill(alg, node.output[0])
    value = index.const(node.input[0])
    return None if value is None or value.size != 1 else (float(value.reshape(-1)[0]), {i, shape[0]})


def _expanded_constant(index: GraphIndex, i: int, like: str) -> tuple[float, set[int]] | None:
    """(v, nodes) for Expand(v, Concat(constants)) of a one-element constant v whose shape leaves
    `like`'s as it is (JAX's broadcast of a scalar, with the target shape concatenated from dims)."""
    node = index.nodes[i]
    value = index.const(node.input[0]) if node.op_type == "Expand" else None
    if value is None or value.size != 1:
        return None
    j = index.producer.get(node.input[1])
    if j is None or index.nodes[j].op_type != "Concat":
        return None
    concatenated = index.nodes[j].input
    dims = [d for d in (index.const(v) for v in concatenated) if d is not None and d.dtype.kind in "iu"]
    if len(dims) != len(concatenated):
        return None
    shape = tuple(int(d) for d in np.concatenate([d.reshape(-1) for d in dims]))
    if not within_shape(index, shape, like):
        return None
    return float(value.reshape(-1)[0]), {i, j}


def _fill_by_shape_arithmetic(index: GraphIndex, value: str, tensors: tuple[str, ...]) -> tuple[float, set[int]] | None:
    """(v, nodes) for a value that holds v everywhere (lowering.algebra.local_shapes.uniform_fill),
    when its nodes read nothing but constants and the chosen tensors (the function body copies
    them) and its shape, from the index's types, leaves the first tensor's as it is."""
    found = uniform_fill(value, index)
    if found is None or not found[2] <= set(tensors):
        return None
    shape = shape_of(value, index)
    if shape is None:
        return None
    numeric = tuple(d for d in shape if isinstance(d, int))
    if not within_shape(index, numeric if len(numeric) == len(shape) else value, tensors[0]):
        return None
    return found[0], found[1]


class _ConstantValued:
    """Whether a value is computed by elementwise nodes from constants and uniform fills alone."""

    def __init__(self, alg: Algebra, like: str, taken: set[int] | Either) -> None:
        self.alg = alg
        self.like = like
        self.taken = taken
        self.known: dict[str, bool] = {}

    def __call__(self, value: str, budget: int = MAX_NODES) -> bool:
        if value in self.known:
            return self.known[value]
        index = self.alg.index
        i = index.producer.get(value)
        if index.const(value) is not None:
            result = True
        elif i is None or i in self.taken or budget <= 0:
            result = False
        elif (node := index.nodes[i]).op_type in ("ConstantOfShape", "Expand"):
            result = (fill(self.alg, value, self.like) or _expanded_constant(index, i, self.like)
                      or _fill_by_shape_arithmetic(index, value, (self.like,))) is not None
        else:
            result = node.op_type in ELEMENTWISE and all(self(v, budget - 1) for v in node.input if v)
        self.known[value] = result
        return result


class _Dependence:
    """Whether a value is computed, through elementwise nodes, from one of the chosen tensors: the
    values reached forward from them, 16 nodes deep and at most 3 * MAX_NODES nodes (a value past
    that counts as independent, a leaf the proof draws freely, which is sound)."""

    def __init__(self, index: GraphIndex, tensors: tuple[str, ...], taken: set[int] | Either) -> None:
        reached = set(tensors)
        frontier = list(tensors)  # in order: where the budget runs out depends on it
        budget = 3 * MAX_NODES
        for _ in range(16):
            after = []
            for name in frontier:
                for c in index.consumers.get(name, ()):
                    node = index.nodes[c]
                    if node.op_type not in _FOLLOWED or c in taken:  # the set test first: taken may be a view
                        continue
                    for out in node.output:
                        if out not in reached:
                            reached.add(out)
                            after.append(out)
                    budget -= 1
                    if budget < 0:
                        self.reached = reached
                        return
            frontier = after
        self.reached = reached

    def __call__(self, value: str) -> bool:
        return value in self.reached


def is_threshold_kink(index: GraphIndex, node) -> bool:
    """A kink at a threshold: Sign, Relu, Shrink, or a comparison, Clip, Min or Max of one tensor
    against constants or single elements. Every spelling of the two functions has one (|x| < beta,
    max(|p| - t, 0), sign(x), clip(x / beta, -1, 1)); a Max of two tensors or an Abs alone is
    elementwise math of some other kind, and starting there only costs time."""
    if node.domain not in ("", "ai.onnx") or node.op_type in ("Abs", "Where"):
        return False
    if node.op_type in ("Sign", "Relu", "Shrink"):
        return True
    tensors = [v for v in node.input if v and index.numel(v) != 1 and index.const(v) is None]
    return len(tensors) == 1


def is_difference(index: GraphIndex, i: int) -> bool:
    """A Sub or Add of two values that are neither constants nor single elements."""
    node = index.nodes[i]
    if node.op_type not in ("Sub", "Add") or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return False
    return all(index.const(v) is None and index.numel(v) != 1 for v in node.input)


_LOOKS_THROUGH = frozenset({"Abs", "Neg", "Cast", "Identity", "Mul", "Div", "Add", "Sub", "Reciprocal"})


def differences_behind(index: GraphIndex, kink: int, taken: set[int], depth: int = 5) -> list[int]:
    """The difference nodes a kink op reads over at most `depth` steps that keep it a function of
    the difference alone: |x|, -x, a cast, x times, over, plus or minus one element, one element
    over x (|x| - t, x / beta, 1 - t/|p|, the group-lasso spelling of the shrink). A kink over
    anything else is not one of the fused functions' breakpoints."""
    found: list[int] = []
    frontier, seen = [kink], {kink}
    for _ in range(depth):
        after = []
        for i in frontier:
            node = index.nodes[i]
            # the kink op itself reads any of its inputs; the steps between read one tensor
            reads = node.input if i == kink else [v for v in node.input if v and index.numel(v) != 1]
            if i != kink and len(reads) != 1:
                continue
            for name in reads:
                j = index.producer.get(name)
                if j is None or j in seen or j in taken:
                    continue
                seen.add(j)
                if is_difference(index, j):
                    found.append(j)
                elif index.nodes[j].op_type in _LOOKS_THROUGH and index.nodes[j].domain in ("", "ai.onnx"):
                    after.append(j)
        frontier = after
    return found


def forward_cone(walks: Walks, start: int, depth: int = 14, limit: int = 48, foreign: int = 2) -> list[int]:
    """Elementwise nodes that read `start`'s output through at most `depth` elementwise nodes,
    latest first: the candidate outputs of the regions around one difference. A node joins only
    while the cone reads at most `foreign` tensors from outside (dout, a label broadcast): a
    function of one difference reads few, and a graph of arbitrary elementwise math is cut short."""
    index, taken = walks.alg.index, walks.taken
    constant = walks.constant(index.nodes[start].input[0])
    seen = {start}
    made = set(index.nodes[start].output)
    outside: set[str] = set()
    frontier = [start]
    for _ in range(depth):
        step = []
        for i in frontier:
            for name in index.nodes[i].output:
                for c in index.consumers.get(name, ()):
                    node = index.nodes[c]
                    if c in seen or c in taken or node.op_type not in ELEMENTWISE:
                        continue
                    reads = {v for v in node.input if v and v not in made and index.numel(v) != 1
                             and index.const(v) is None and not constant(v)}
                    if len(outside | reads) > foreign:
                        continue
                    outside |= reads
                    seen.add(c)
                    made.update(node.output)
                    step.append(c)
        frontier = step
        if len(seen) > limit:
            break
    return sorted(seen, reverse=True)
