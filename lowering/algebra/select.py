"""The select view: a value as (condition, branch when true, branch when false).

Read from Where; from tf2onnx's arithmetic select Add(Mul(Cast(c), a), Mul(b, mask')) with mask'
the complement of Cast(c) (tf2onnx's Cast(Not(c)), or masks written by hand); from the sum
u*select(c, A, 0) + v*select(c, 0, B) a Keras loss's gradient is; and from the sum of products
with Where(c, g, 0) or Where(c, 0, g) that autograd makes of a torch.where loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from .comparison import ComparisonView
from .monomial import Monomial, MonomialView, is_zero, product, sum_like
from .reader import MAX_SUM_TERMS, GraphReader
from .terms import TermsView


@dataclass
class Select:
    cond: str
    when_true: Monomial
    when_false: Monomial
    nodes: set[int]
    arithmetic: bool  # tf2onnx form: non-finite values in the branch not taken poison the result


Branches = tuple[str, Monomial, Monomial, set[int]]  # cond, when true, when false, the nodes read


class SelectView:
    def __init__(self, reader: GraphReader, products: MonomialView, comparisons: ComparisonView,
                 sums: TermsView) -> None:
        self._reader = reader
        self._products = products
        self._comparisons = comparisons
        self._sums = sums

    def select(self, value: str) -> Select | None:
        found = self._reader.producer(value, "Where")
        if found is not None:
            i, node = found
            stripped = self._comparisons.strip_not(node.input[0])
            a, b = self._products.monomial(node.input[1]), self._products.monomial(node.input[2])
            if stripped.negated:
                a, b = b, a
            return Select(stripped.cond, a, b, {i} | stripped.nodes, arithmetic=False)
        return self._arithmetic_select(value, masked_terms=True) or self._select_sum(value)

    def _arithmetic_select(self, value: str, masked_terms: bool) -> Select | None:
        """tf2onnx's select, Add(Mul(Cast(c), a), Mul(b, Cast(Not(c)))), and with masked_terms
        also the sum of two such selects' scaled zero-padded halves (_masked_terms)."""
        found = self._reader.producer(value, "Add", "Sum")
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
        monomial = self._products.monomial
        if len(addends) == 2:
            return monomial(addends[0]), monomial(addends[1])
        groups: dict[tuple, list[Monomial]] = {}
        for name in addends:
            # products the copies share (a mask times 0.5) stay whole in each walk: opened, the
            # mask shows as a factor
            mono = self._products.opened(monomial(name))
            groups.setdefault(tuple(sorted(mono.factors.items())), []).append(mono)
        if len(groups) != 2:
            return None
        first, second = (sum_like(terms) for terms in groups.values())
        return None if first is None or second is None else (first, second)

    def _arith_select_branches(self, a: Monomial, b: Monomial) -> Branches | None:
        """Finds a mask Cast(c) among a's factors and its complement among b's: tf2onnx's float
        select, and the same select written by hand with masks (_complement_mask)."""
        reader = self._reader
        for name, exp in a.factors.items():
            cast = reader.producer(name, "Cast") if exp == 1 else None
            if cast is None or reader.index.elem_type(cast[1].input[0]) != onnx.TensorProto.BOOL:
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
        reader = self._reader
        cast2 = reader.producer(other, "Cast")
        if cast2 is not None:
            base = self._comparisons.strip_not(cond)
            inner = self._comparisons.strip_not(cast2[1].input[0])
            if inner.cond == base.cond and inner.negated != base.negated:
                return {cast2[0]} | (inner.nodes - base.nodes)  # the Nots only the false mask has
            found = self._comparisons.complementary(cond, cast2[1].input[0])
            return None if found is None else {cast2[0], found}
        sub = reader.producer(other, "Sub")
        if (sub is not None and len(sub[1].input) == 2 and sub[1].input[1] == mask
                and reader.scalar(sub[1].input[0]) == 1.0):
            return {sub[0]}
        return None

    def _masked_terms(self, a: Monomial, b: Monomial) -> Branches | None:
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
        found = self._reader.producer(value, "Add", "Sum")
        if found is None or len(found[1].input) < 2:
            return None
        leaves, nodes = self._sums.sum_leaves(found[0])
        if leaves is None:
            return None
        sides: dict[bool, list[Monomial]] = {True: [], False: []}
        cond = None
        for leaf in leaves:
            term = self._products.monomial(leaf)
            picked = self._zero_where_factor(term)
            if picked is None:  # the Where inside a product the terms share (Where(c, g, 0) / beta)
                term = self._products.opened(term)
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

    def _zero_where_factor(self, term: Monomial) -> tuple[str, bool, tuple[str, Monomial], set[int]] | None:
        """(c, side, (factor, its kept branch), nodes) for the one factor of term that is
        Where(c, A, 0) (side True, A kept) or Where(c, 0, B) (side False, B kept)."""
        reader = self._reader
        for name, exp in term.factors.items():
            where = reader.producer(name, "Where") if exp == 1 else None
            if where is None or len(where[1].input) != 3:
                continue
            stripped = self._comparisons.strip_not(where[1].input[0])
            a, b = where[1].input[1], where[1].input[2]
            if stripped.negated:
                a, b = b, a
            for side, kept, zero in ((True, a, b), (False, b, a)):
                if reader.is_zero_constant(zero) and not reader.is_zero_constant(kept):
                    return stripped.cond, side, (name, self._products.monomial(kept)), {where[0]} | stripped.nodes
        return None
