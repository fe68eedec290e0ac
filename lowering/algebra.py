"""Algebraic views of a normalized graph, the vocabulary the pattern modules are written in.

Instead of matching fixed operator trees (and enumerating every operand order and grouping), a
pattern asks for the algebraic shape of a value:
  monomial(v)  -> coefficient * product of runtime factors with exponents, seen through Mul, Div,
                  Neg and Reciprocal, so g*x/b, x*(g/b), (x/b)*g and Mul(x, 1/b)*g all look alike;
  terms(v)     -> signed addends, seen through Add, Sub and Neg;
  select(v)    -> (condition, branch when true, branch when false) for Where, for the arithmetic
                  select Add(Mul(Cast(c), a), Mul(b, mask')) with mask' the complement of Cast(c)
                  (tf2onnx's Cast(Not(c)), or masks written by hand), and for the sum
                  u*select(c, A, 0) + v*select(c, 0, B) a Keras loss's gradient is, and for
                  the sum of products with Where(c, g, 0) or Where(c, 0, g) that autograd makes
                  of a torch.where loss;
  compare(v)   -> (lhs, relation, rhs) for Less/LessOrEqual/Greater/GreaterOrEqual and Not(...);
  clamp(v)     -> (y, lo, hi) for Clip(y, lo, hi), Min(Max(y, lo), hi) and Max(Min(y, hi), lo);
  uncast(v)    -> the float16/bfloat16 value a Cast-to-float32 widened, if any;
  unary_narrowed(v, op) -> op's input, also through Cast<T>(op(Cast<float32>(x: T)));
  numel_of(v)  -> the tensor whose element count v computes at runtime (Size, ReduceProd(Shape)).
Commutativity and association are therefore handled locally, per node, in time proportional to
the size of the pattern. Every view records the nodes it walked, which become the match.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from .graph import EXACT_WIDENING, GraphIndex, Node, attr

MAX_WALK = 24  # nodes one view may walk: patterns are small, this bounds the work per anchor
MAX_SUM_TERMS = 4  # addends of a sum of selects (autograd of a hand-written loss makes 2 or 3)
Bound = str | float | None  # a clamp bound: a value name, an attribute's float, or left out


@dataclass
class Monomial:
    coef: float
    factors: dict[str, int]  # value name -> exponent (never 0)
    nodes: set[int] = field(default_factory=set)

    def without(self, name: str, exponent: int = 1) -> Monomial | None:
        """This monomial divided by name**exponent, or None when that factor is not there."""
        if self.factors.get(name, 0) != exponent:
            return None
        rest = dict(self.factors)
        del rest[name]
        return Monomial(self.coef, rest, set(self.nodes))

    def dividing_out(self, name: str) -> Monomial:
        """This monomial without its factor `name`, whatever its exponent (a factor the caller
        found among self.factors)."""
        rest = dict(self.factors)
        del rest[name]
        return Monomial(self.coef, rest, set(self.nodes))


@dataclass
class Select:
    cond: str
    when_true: Monomial
    when_false: Monomial
    nodes: set[int]
    arithmetic: bool  # tf2onnx form: non-finite values in the branch not taken poison the result


@dataclass(frozen=True)
class Reach:
    """A cheap pre-check: an op in `targets` (a node `accept` takes, if given) within `depth`
    producers of a value, walking only through ops in `through`."""

    targets: frozenset[str]
    through: frozenset[str]
    depth: int
    accept: Callable[[GraphIndex, Node], bool] | None = None


@dataclass
class Comparison:
    lhs: str
    relation: str  # "<", "<=", ">", ">="
    rhs: str
    nodes: set[int]


_RELATIONS = {"Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class Algebra:
    """The views above over one GraphIndex; `taken` nodes (already fused) are opaque leaves."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self.taken: set[int] = set()
        self.seen: set[int] = set()  # nodes looked at since the caller last cleared it
        self._distances: dict[tuple[Reach, ...], set[str] | dict[str, int]] = {}

    def producer(self, value: str, *ops: str) -> tuple[int, Node] | None:
        i = self.index.producer.get(value)
        if i is None or i in self.taken:
            return None
        self.seen.add(i)
        node = self.index.nodes[i]
        if node.domain not in ("", "ai.onnx") or (ops and node.op_type not in ops):
            return None
        return i, node

    def reaches(self, value: str, reach: Reach) -> bool:
        """Most anchors fail this pre-check before a full view. The distances come from one forward
        sweep per Reach, which ignores fusions already made and so can only let through an anchor
        the full view then refuses."""
        return value in self.reached((reach,))

    def reached(self, reaches: tuple[Reach, ...]) -> set[str] | dict[str, int]:
        """The values any of `reaches` holds for, computed once per tuple."""
        table = self._distances.get(reaches)
        if table is None:
            if len(reaches) == 1:
                (r,) = reaches
                table = self._sweep(r.targets, r.through, r.depth, r.accept)
            else:
                table = set().union(*(self.reached((r,)) for r in reaches))
            self._distances[reaches] = table
        return table

    def _sweep(self, targets: frozenset[str], through: frozenset[str], depth: int,
               accept: Callable[[GraphIndex, Node], bool] | None) -> dict[str, int]:
        """Values whose producer chain reaches `targets` in fewer than `depth` steps: a breadth
        first walk down from the target nodes, so only their neighbourhood is visited."""
        index = self.index
        nodes, consumers = index.nodes, index.consumers
        frontier = [name for op in targets for i in index.by_op.get(op, ())
                    if accept is None or accept(index, nodes[i]) for name in nodes[i].output]
        dist = dict.fromkeys(frontier, 0)
        for d in range(1, depth):
            reached = []
            for value in frontier:
                for c in consumers.get(value, ()):
                    node = nodes[c]
                    if node.op_type in through:
                        for name in node.output:
                            if name not in dist:
                                dist[name] = d
                                reached.append(name)
            frontier = reached
        return dist

    def scalar(self, value: str) -> float | None:
        return self.index.scalar(value)

    def monomial(self, value: str, stop: frozenset[str] = frozenset(),
                 region: frozenset[int] = frozenset()) -> Monomial:
        """The product view of value. The walk enters a producer only when every use of its
        output lies inside the walk (or `region`), so values the rest of the graph also reads,
        like a shared delta, stay factors instead of dissolving into the match."""
        index = self.index
        producers, consumers, all_nodes = index.producer, index.consumers, index.nodes
        taken, seen, graph_outputs = self.taken, self.seen, index.graph_outputs
        coef = 1.0
        factors: dict[str, int] = {}
        nodes: set[int] = set()
        budget = MAX_WALK
        stack = [(value, 1)]  # depth first, left operand first: ownership depends on what was walked
        while stack:
            v, exponent = stack.pop()
            i = producers.get(v)
            # only initializers, folded values and Constant nodes can be constants
            if i is None or all_nodes[i].op_type == "Constant":
                c = index.scalar(v)
                if c is not None and index.elem_type(v) in _FLOAT_TYPES:
                    coef *= c if exponent == 1 else 1.0 / c if c != 0 else math.inf
                    continue
            node = None
            walked: int | None = None
            if i is None or i in taken or v in stop or budget <= 0:
                owned = False
            elif v == value:
                owned = True
            elif v in graph_outputs:
                owned = False
            else:
                users = consumers.get(v, ())
                owned = (users[0] in nodes or users[0] in region) if len(users) == 1 else all(
                    u in nodes or u in region for u in users)
            if owned and i is not None:
                walked = i
                seen.add(i)
                node = all_nodes[i]
                op = node.op_type
                if (op not in _PRODUCT_OPS or node.domain not in ("", "ai.onnx")
                        or (op in ("Mul", "Div") and len(node.input) != 2)):
                    node = None
            if node is None or walked is None:
                factors[v] = factors.get(v, 0) + exponent
                continue
            budget -= 1
            nodes.add(walked)
            if op == "Mul":
                stack.append((node.input[1], exponent))
                stack.append((node.input[0], exponent))
            elif op == "Div":
                stack.append((node.input[1], -exponent))
                stack.append((node.input[0], exponent))
            elif op == "Neg":
                coef = -coef
                stack.append((node.input[0], exponent))
            else:
                stack.append((node.input[0], -exponent))
        return Monomial(coef, {k: e for k, e in factors.items() if e != 0}, nodes)

    def _is_product(self, value: str) -> bool:
        i = self.index.producer.get(value)
        return i is not None and self.index.nodes[i].op_type in _PRODUCT_OPS

    def _owned(self, value: str, nodes: set[int], region: frozenset[int]) -> bool:
        if value in self.index.graph_outputs:
            return False
        return all(c in nodes or c in region for c in self.index.consumers.get(value, ()))

    def expand_shared(self, monos: list[Monomial], region: set[int], stop: frozenset[str] = frozenset()) -> None:
        """Expands factors that several monomials share and only they use (g = dout * norm,
        read by both branches of a select), until nothing more can be expanded."""
        changed = True
        while changed:
            changed = False
            inside = frozenset(region.union(*(m.nodes for m in monos)))
            for mono in monos:
                for name, exp in list(mono.factors.items()):
                    if name in stop or not self._is_product(name) or not self._owned(name, set(), inside):
                        continue
                    sub = self.monomial(name, stop, inside)
                    if not sub.nodes:
                        continue
                    factors = dict(mono.factors)
                    del factors[name]
                    mono.coef *= sub.coef ** exp
                    for k, v in sub.factors.items():
                        factors[k] = factors.get(k, 0) + v * exp
                    mono.factors = {k: v for k, v in factors.items() if v != 0}
                    mono.nodes |= sub.nodes
                    changed = True
                    break

    def regroup(self, mono: Monomial, group: dict[str, int], stop: frozenset[str] = frozenset()
                ) -> tuple[str, set[int], float] | None:
        """(value, its nodes, c) for a node walked by `mono` that computes c * prod(group).

        The product walk is greedy: when an input such as delta is itself a product computed
        upstream, its factors spill into the monomial. This finds the upstream value again so
        it can stay outside the match; the caller divides its own coefficient by c.
        """
        for i in sorted(mono.nodes):
            out = self.index.nodes[i].output[0]
            sub = self.monomial(out, stop)
            if sub.factors == group and sub.coef != 0 and math.isfinite(sub.coef):
                return out, sub.nodes, sub.coef
        return None

    def terms(self, value: str) -> tuple[list[tuple[int, str]], set[int]]:
        """The two signed addends of value = Add(a, b) or Sub(a, b). One level only: what feeds
        the addends (a var that is itself a sum or a negation) stays whole, which is what every
        pattern wants of an update or a threshold."""
        found = self.producer(value, "Add", "Sub")
        if found is None or len(found[1].input) != 2:
            return [(1, value)], set()
        i, node = found
        a, b = node.input
        return [(1, a), (-1 if node.op_type == "Sub" else 1, b)], {i}

    def select(self, value: str) -> Select | None:
        found = self.producer(value, "Where")
        if found is not None:
            i, node = found
            cond, nodes = self._strip_not(node.input[0])
            a, b = self.monomial(node.input[1]), self.monomial(node.input[2])
            if nodes["negated"]:
                a, b = b, a
            return Select(cond, a, b, {i} | nodes["nodes"], arithmetic=False)
        return self._arithmetic_select(value, masked_terms=True) or self._select_sum(value)

    def _arithmetic_select(self, value: str, masked_terms: bool) -> Select | None:
        """tf2onnx's select, Add(Mul(Cast(c), a), Mul(b, Cast(Not(c)))), and with masked_terms
        also the sum of two such selects' scaled zero-padded halves (_masked_terms)."""
        found = self.producer(value, "Add", "Sum")
        if found is None or not 2 <= len(found[1].input) <= MAX_SUM_TERMS:
            return None
        i, node = found
        halves = self._two_halves(node.input)
        if halves is None:
            return None
        left, right = halves
        for a, b in ((left, right), (right, left)):
            picked = self._arith_select_branches(a, b) or (self._masked_terms(a, b) if masked_terms else None)
            if picked is not None:
                cond, when_true, when_false, nodes = picked
                return Select(cond, when_true, when_false, {i} | nodes | a.nodes | b.nodes, arithmetic=True)
        return None

    def _two_halves(self, addends: Sequence[str]) -> tuple[Monomial, Monomial] | None:
        """The addends as two monomials, those with the same runtime factors added up: an Add's
        two, or a Sum's, where TensorFlow's gradient of x*x writes one term per operand
        (Sum(a, b, a), or a second copy of a multiplied in another order). The halves of an
        arithmetic select are never both nonzero at one element, so a + b + a is 2a + b."""
        if len(addends) == 2:
            return self.monomial(addends[0]), self.monomial(addends[1])
        groups: dict[tuple, list[Monomial]] = {}
        for name in addends:
            # products the copies share (a mask times 0.5) stay whole in each walk: opened, the
            # mask shows as a factor
            mono = self._opened(self.monomial(name))
            groups.setdefault(tuple(sorted(mono.factors.items())), []).append(mono)
        if len(groups) != 2:
            return None
        first, second = (sum_like(terms) for terms in groups.values())
        return None if first is None or second is None else (first, second)

    def _arith_select_branches(self, a: Monomial, b: Monomial):
        """Finds a mask Cast(c) among a's factors and its complement among b's: tf2onnx's float
        select, and the same select written by hand with masks (_complement_mask)."""
        for name, exp in a.factors.items():
            cast = self.producer(name, "Cast") if exp == 1 else None
            if cast is None or self.index.elem_type(cast[1].input[0]) != onnx.TensorProto.BOOL:
                continue
            cond = cast[1].input[0]
            for other, exp2 in b.factors.items():
                nodes = self._complement_mask(name, cond, other) if exp2 == 1 else None
                if nodes is not None:
                    return cond, a.dividing_out(name), b.dividing_out(other), {cast[0]} | nodes
        return None

    def _complement_mask(self, mask: str, cond: str, other: str) -> set[int] | None:
        """The nodes that make `other` the complement of mask = Cast(cond), else None:
          Cast(Not(cond))  tf2onnx; cond may itself be a Not (tf2onnx writes a <= b as Not(a > b)
                           before opset 12), so the masks are compared by what is left under their
                           Nots and how many each has;
          Cast(c2)         c2 the complementary comparison of cond's operands (|x| >= b beside
                           |x| < b, each mask written out). A NaN operand makes both masks 0, where
                           a select would take a branch; the patterns compare |x| or |p|, whose
                           branches are NaN there anyway;
          1 - mask."""
        cast2 = self.producer(other, "Cast")
        if cast2 is not None:
            base, info = self._strip_not(cond)
            inner, info2 = self._strip_not(cast2[1].input[0])
            if inner == base and info2["negated"] != info["negated"]:
                return {cast2[0]} | (info2["nodes"] - info["nodes"])  # the Nots only the false mask has
            found = self._complementary(cond, cast2[1].input[0])
            return None if found is None else {cast2[0], found}
        sub = self.producer(other, "Sub")
        if (sub is not None and len(sub[1].input) == 2 and sub[1].input[1] == mask
                and self.scalar(sub[1].input[0]) == 1.0):
            return {sub[0]}
        return None

    def _complementary(self, cond: str, other: str) -> int | None:
        """The node of `other` when it compares cond's operands with the negated relation."""
        first, second = self.producer(cond, *_RELATIONS), self.producer(other, *_RELATIONS)
        if first is None or second is None or len(first[1].input) != 2 or len(second[1].input) != 2:
            return None
        if _NEGATED[_RELATIONS[first[1].op_type]] != _RELATIONS[second[1].op_type]:
            return None
        same = all(u == v or (self.scalar(u) is not None and self.scalar(u) == self.scalar(v))
                   for u, v in zip(first[1].input, second[1].input))
        return second[0] if same else None

    def _masked_terms(self, a: Monomial, b: Monomial):
        """Finds select(c, A, 0) among a's factors and select(c, 0, B) among b's, both tf2onnx
        selects: a * select(c, A, 0) + b * select(c, 0, B) is select(c, a*A, b*B), the gradient
        of a Keras loss with a tf.where inside (each branch's upstream gradient is masked apart)."""
        # the halves are plain arithmetic selects: no search below them, so the work stays
        # proportional to the two products, however deep a chain of sums runs
        for name, exp in a.factors.items():
            sa = self._arithmetic_select(name, masked_terms=False) if exp == 1 else None
            if sa is None or not is_zero(sa.when_false):
                continue
            for other, exp2 in b.factors.items():
                sb = self._arithmetic_select(other, masked_terms=False) if exp2 == 1 and other != name else None
                if sb is None or sb.cond != sa.cond or not is_zero(sb.when_true):
                    continue
                return (sa.cond, product(a.dividing_out(name), sa.when_true),
                        product(b.dividing_out(other), sb.when_false), sa.nodes | sb.nodes)
        return None

    def _select_sum(self, value: str) -> Select | None:
        """sum_k m_k * Where(c, A_k, 0) and m_k * Where(c, 0, B_k), up to MAX_SUM_TERMS terms:
        autograd of a loss written as torch.where(c, a(x), b(x)) (torchvision's, fvcore's and
        mmdet's SmoothL1) sends the upstream gradient through each branch with a Where that
        zeroes the other, then adds the terms the chain rule makes. It is select(c, sum of the
        A-side terms, sum of the B-side terms) where each side's terms have the same runtime
        factors (their coefficients add up); as for tf2onnx's select, an inf factor of the side
        not taken multiplies a 0 into NaN (arithmetic)."""
        found = self.producer(value, "Add", "Sum")
        if found is None or len(found[1].input) < 2:
            return None
        leaves, nodes = self._sum_leaves(found[0])
        if leaves is None:
            return None
        sides: dict[bool, list[Monomial]] = {True: [], False: []}
        cond = None
        for leaf in leaves:
            term = self.monomial(leaf)
            picked = self._zero_where_factor(term)
            if picked is None:  # the Where inside a product the terms share (Where(c, g, 0) / beta)
                term = self._opened(term)
                picked = self._zero_where_factor(term)
            if picked is None:
                return None
            c, taken, branch, where_nodes = picked
            if cond is not None and c != cond:
                return None
            cond = c
            sides[taken].append(product(term.dividing_out(branch[0]), branch[1]))
            nodes |= term.nodes | where_nodes
        when_true, when_false = sum_like(sides[True]), sum_like(sides[False])
        if cond is None or when_true is None or when_false is None:
            return None
        return Select(cond, when_true, when_false, nodes | when_true.nodes | when_false.nodes, arithmetic=True)

    def _opened(self, term: Monomial) -> Monomial:
        """term with each factor that is a product (shared with other terms, so the walk left it
        whole) replaced by its own product view."""
        for name, exp in list(term.factors.items()):
            if exp != 1 or not self._is_product(name):
                continue
            sub = self.monomial(name)
            if sub.nodes:
                term = product(term.dividing_out(name), sub)
        return term

    def _sum_leaves(self, root: int) -> tuple[list[str] | None, set[int]]:
        """The addends of the Add/Sum tree at root, through Adds and Sums only the tree reads; an
        addend a Sum repeats is listed each time (TensorFlow's gradient of x*x: Sum(a, b, a))."""
        leaves: list[str] = []
        nodes = {root}
        stack = list(reversed(self.index.nodes[root].input))
        while stack:
            v = stack.pop()
            found = self.producer(v, "Add", "Sum")
            users = self.index.consumers.get(v)
            if (found is not None and len(found[1].input) >= 2 and v not in self.index.graph_outputs
                    and users and all(c in nodes for c in users)):
                nodes.add(found[0])
                stack.extend(reversed(found[1].input))
            else:
                leaves.append(v)
            if len(leaves) + len(stack) > MAX_SUM_TERMS:
                return None, nodes
        return leaves, nodes

    def _zero_where_factor(self, term: Monomial) -> tuple[str, bool, tuple[str, Monomial], set[int]] | None:
        """(c, side, (factor, its kept branch), nodes) for the one factor of term that is
        Where(c, A, 0) (side True, A kept) or Where(c, 0, B) (side False, B kept)."""
        for name, exp in term.factors.items():
            where = self.producer(name, "Where") if exp == 1 else None
            if where is None or len(where[1].input) != 3:
                continue
            cond, info = self._strip_not(where[1].input[0])
            a, b = where[1].input[1], where[1].input[2]
            if info["negated"]:
                a, b = b, a
            for side, kept, zero in ((True, a, b), (False, b, a)):
                if self._is_zero_constant(zero) and not self._is_zero_constant(kept):
                    return cond, side, (name, self.monomial(kept)), {where[0]} | info["nodes"]
        return None

    def _is_zero_constant(self, value: str) -> bool:
        c = self.index.const(value)
        return c is not None and c.size > 0 and not c.any()

    def _strip_not(self, cond: str) -> tuple[str, dict]:
        nodes: set[int] = set()
        negated = False
        while (found := self.producer(cond, "Not")) is not None:
            nodes.add(found[0])
            negated = not negated
            cond = found[1].input[0]
        return cond, {"nodes": nodes, "negated": negated}

    def compare(self, cond: str) -> Comparison | None:
        inner, info = self._strip_not(cond)
        found = self.producer(inner, *_RELATIONS)
        if found is None:
            return None
        i, node = found
        relation = _RELATIONS[node.op_type]
        if info["negated"]:
            relation = _NEGATED[relation]
        return Comparison(node.input[0], relation, node.input[1], {i} | info["nodes"])

    def clamp(self, value: str) -> tuple[str, Bound, Bound, set[int]] | None:
        """(y, lo, hi, nodes) when value = clamp(y, lo, hi): Clip, Min(Max(y, lo), hi) (the dynamo
        exporter's torch.clamp before its optimizer makes it a Clip) or Max(Min(y, hi), lo)
        (tf.clip_by_value through tf2onnx). The nestings agree everywhere, NaN included
        (onnxruntime's Min and Max propagate it); bound_value() reads a bound as a number."""
        found = self.producer(value, "Clip", "Min", "Max", "Cast")
        if found is None:
            return None
        i, node = found
        if node.op_type == "Cast":
            return self._narrowed_clamp(i, node)
        if node.op_type == "Clip":
            return (node.input[0], *clip_bounds(node), {i})
        inner = self.producer(node.input[0], "Max" if node.op_type == "Min" else "Min")
        if len(node.input) != 2 or inner is None or len(inner[1].input) != 2:
            return None
        outer_bound, inner_bound = node.input[1], inner[1].input[1]
        lo, hi = (inner_bound, outer_bound) if node.op_type == "Min" else (outer_bound, inner_bound)
        return inner[1].input[0], lo, hi, {i, inner[0]}

    def _narrowed_clamp(self, i: int, cast: Node) -> tuple[str, Bound, Bound, set[int]] | None:
        """Cast<T>(clamp(Cast<W>(y: T), lo, hi)) as clamp(y, lo', hi'): onnxconverter-common runs
        Min and Max in float32 between Casts. Rounding to T is monotonic and leaves y as it is, so
        that is the clamp in T with the bounds rounded to T: a constant bound comes back as its
        rounded number, a runtime one must be widened from T (it is then the bound)."""
        inner = self.producer(cast.input[0], "Clip", "Min", "Max")
        found = None if inner is None else self.clamp(cast.input[0])
        to = attr(cast, "to")
        narrow = None if found is None else self.narrowed(found[0], to)
        if found is None or narrow is None:
            return None
        _, lo, hi, nodes = found
        nodes = nodes | narrow[1] | {i}
        bounds: list[Bound] = []
        for bound in (lo, hi):
            value = self.bound_value(bound)
            if value is not None:
                with np.errstate(over="ignore"):  # beyond T's range it rounds to inf, as Cast does
                    bound = float(onnx.helper.tensor_dtype_to_np_dtype(to).type(value))
            elif isinstance(bound, str):
                narrow_bound = self.narrowed(bound, to)
                if narrow_bound is None:
                    return None
                bound, nodes = narrow_bound[0], nodes | narrow_bound[1]
            bounds.append(bound)
        return narrow[0], bounds[0], bounds[1], nodes

    def bound_value(self, bound: Bound) -> float | None:
        """A clamp bound as a number: an attribute's float as it is, a value through scalar()."""
        return self.scalar(bound) if isinstance(bound, str) else bound

    def unary(self, value: str, op: str) -> tuple[str, int] | None:
        """(input, node) when value = op(input)."""
        found = self.producer(value, op)
        if found is None or not found[1].input:
            return None
        return found[1].input[0], found[0]

    def unary_narrowed(self, value: str, op: str) -> tuple[str, set[int]] | None:
        """(x, nodes) when value = op(x), or Cast<T>(op(Cast<W>(x: T))) with an exact widening:
        the dynamo exporter computes Sign of a float16/bfloat16 tensor in float32 and casts back.
        Normalization narrows such sandwiches only for ops whose half-precision onnxruntime kernel
        agrees with the float32 one; Sign does not (its float16 kernel maps NaN to 0)."""
        found = self.unary(value, op)
        if found is not None:
            return found[0], {found[1]}
        cast = self.producer(value, "Cast")
        inner = None if cast is None else self.unary(cast[1].input[0], op)
        if cast is None or inner is None:
            return None
        narrow = self.narrowed(inner[0], attr(cast[1], "to"))
        return None if narrow is None else (narrow[0], {cast[0], inner[1]} | narrow[1])

    def uncast(self, value: str) -> tuple[str, int, int] | None:
        """(source, cast node, source dtype) when value = Cast<float32>(source float16/bfloat16)."""
        found = self.producer(value, "Cast")
        if found is None or attr(found[1], "to") != onnx.TensorProto.FLOAT:
            return None
        source = found[1].input[0]
        dtype = self.index.elem_type(source)
        if dtype not in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
            return None
        return source, found[0], dtype

    def widened(self, value: str) -> str:
        """The narrower value behind exact widening Casts (float16 -> float32 and the like)."""
        while (found := self.producer(value, "Cast")) is not None:
            source = found[1].input[0]
            if (self.index.elem_type(source), attr(found[1], "to")) not in EXACT_WIDENING:
                break
            value = source
        return value

    def widening_casts(self, value: str) -> set[int]:
        """The exact widening Casts that widened(value) looks through."""
        nodes = set()
        while value != self.widened(value):
            found = self.producer(value, "Cast")
            assert found is not None  # widened() walked through this Cast
            nodes.add(found[0])
            value = found[1].input[0]
        return nodes

    def narrowed(self, value: str, to: int | None) -> tuple[str, set[int]] | None:
        """(x, the widening Casts) when value exactly widens an x of dtype `to`, the type a Cast
        back narrows to; None otherwise."""
        x = self.widened(value)
        if x == value or self.index.elem_type(x) != to:
            return None
        return x, self.widening_casts(value)

    def numel_of(self, value: str) -> tuple[str, set[int]] | None:
        """(tensor, nodes) when value computes numel(tensor) at runtime, possibly cast to float.

        Accepts Size(t), ReduceProd(Shape(t)), and products of single dimensions
        (Squeeze/Gather of Shape(t) slices) with constants standing for t's static dimensions,
        which is how the dynamo exporter spells numel for a dynamic shape.
        """
        acc = _DimProduct()
        if not self._dims(value, acc) or acc.tensor is None:
            return None
        if acc.all_dims:
            return (acc.tensor, acc.nodes) if acc.const == 1 else None
        vt = self.index.type_of(acc.tensor)
        if vt is None or vt.shape is None or len(set(acc.dims)) != len(acc.dims):
            return None
        rest = [d for i, d in enumerate(vt.shape) if i not in acc.dims]
        static = [d for d in rest if isinstance(d, int)]
        if len(static) != len(rest) or math.prod(static) != acc.const:
            return None
        return acc.tensor, acc.nodes

    def _dims(self, value: str, acc: _DimProduct) -> bool:
        c = self.index.const(value)
        if c is not None:
            if c.size != 1 or float(c.reshape(-1)[0]) != int(c.reshape(-1)[0]):
                return False
            acc.const *= int(c.reshape(-1)[0])
            return True
        found = self.producer(value, "Cast", "Mul", "Size", "ReduceProd", "Squeeze", "Reshape", "Gather")
        if found is None:
            return False
        i, node = found
        acc.nodes.add(i)
        op = node.op_type
        if op == "Cast":
            return self._dims(node.input[0], acc)
        if op == "Mul":
            return len(node.input) == 2 and self._dims(node.input[0], acc) and self._dims(node.input[1], acc)
        if op == "Size":
            return acc.take(node.input[0], None)
        if op == "ReduceProd":
            if attr(node, "keepdims", 1) != 0 or (len(node.input) > 1 and node.input[1]) or attr(node, "axes"):
                return False
            shape = self._shape_slice(node.input[0], acc)
            return shape is not None and acc.take(shape[0], shape[1])
        if op == "Gather":
            idx = self.index.const(node.input[1]) if len(node.input) == 2 else None
            shape = self._shape_slice(node.input[0], acc)
            if idx is None or idx.size != 1 or shape is None or shape[1] is not None:
                return False
            return acc.take(shape[0], [int(idx.reshape(-1)[0])])
        shape = self._shape_slice(node.input[0], acc)  # Squeeze/Reshape of a one-dimension slice
        return shape is not None and shape[1] is not None and len(shape[1]) == 1 and acc.take(shape[0], shape[1])

    def _shape_slice(self, value: str, acc: _DimProduct) -> tuple[str, list[int] | None] | None:
        """(t, dims) for Shape(t, start, end); dims None means every dimension."""
        found = self.producer(value, "Shape")
        if found is None:
            return None
        i, node = found
        acc.nodes.add(i)
        start, end = attr(node, "start"), attr(node, "end")
        if start is None and end is None:
            return node.input[0], None
        vt = self.index.type_of(node.input[0])
        if vt is None or vt.shape is None:
            return None
        rank = len(vt.shape)
        lo = start or 0
        lo = lo + rank if lo < 0 else lo
        hi = rank if end is None else (end + rank if end < 0 else min(end, rank))
        return node.input[0], list(range(lo, hi))


def clip_bounds(node: Node | onnx.NodeProto) -> tuple[Bound, Bound]:
    """Clip's (min, max): value names when they are inputs (opset 11 on), floats from the
    attributes before that, None for a bound left out."""
    lo = node.input[1] if len(node.input) > 1 and node.input[1] else attr(node, "min")
    hi = node.input[2] if len(node.input) > 2 and node.input[2] else attr(node, "max")
    return lo, hi


def is_zero(mono: Monomial) -> bool:
    """mono is the constant 0."""
    return mono.coef == 0.0 and not mono.factors


def sum_like(terms: list[Monomial]) -> Monomial | None:
    """The sum of monomials with the same runtime factors (their coefficients add), 0 for none."""
    if not terms:
        return Monomial(0.0, {})
    first = terms[0]
    # one sign: terms that cancel would leave the graph's rounding residue where the sum is 0
    if any(t.factors != first.factors or t.coef * first.coef < 0 for t in terms[1:]):
        return None
    return Monomial(math.fsum(t.coef for t in terms), dict(first.factors), set().union(*(t.nodes for t in terms)))


def product(x: Monomial, y: Monomial) -> Monomial:
    """x * y."""
    factors = dict(x.factors)
    for name, exp in y.factors.items():
        factors[name] = factors.get(name, 0) + exp
    return Monomial(x.coef * y.coef, {k: e for k, e in factors.items() if e}, x.nodes | y.nodes)


@dataclass
class _DimProduct:
    """What a numel walk has seen: one tensor, which of its dimensions, a constant factor."""

    tensor: str | None = None
    dims: list[int] = field(default_factory=list)
    all_dims: bool = False
    const: int = 1
    nodes: set[int] = field(default_factory=set)

    def take(self, tensor: str, dims: list[int] | None) -> bool:
        if self.tensor is not None and self.tensor != tensor:
            return False
        self.tensor = tensor
        if dims is None:
            if self.all_dims:
                return False
            self.all_dims = True
        else:
            self.dims.extend(dims)
        return not (self.all_dims and self.dims)

_PRODUCT_OPS = ("Mul", "Div", "Neg", "Reciprocal")
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
