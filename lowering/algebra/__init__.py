"""Algebraic views of a normalized graph, the vocabulary the pattern modules are written in.

Instead of matching fixed operator trees (and enumerating every operand order and grouping), a
pattern asks for the algebraic shape of a value. Each view is a module over one read-only
GraphIndex (reader.py, which also holds the run's taken and seen nodes):
  monomial.py    monomial(v) -> coefficient * product of runtime factors with exponents, seen
                 through Mul, Div, Neg and Reciprocal, so g*x/b, x*(g/b), (x/b)*g and Mul(x, 1/b)*g
                 all look alike;
  terms.py       terms(v) -> signed addends, seen through Add and Sub (and the leaves of a sum);
  select.py      select(v) -> (condition, branch when true, branch when false), from Where and
                 the arithmetic selects exporters and autograd write;
  comparison.py  compare(v) -> (lhs, relation, rhs) for Less/LessOrEqual/Greater/GreaterOrEqual
                 under any number of Nots;
  casts.py       uncast(v), widened(v), narrowed(v, to), unary_narrowed(v, op): values behind
                 exact widening Casts, and ops run in float32 between Casts;
  clamp.py       clamp(v) -> (y, lo, hi) for Clip, Min(Max(y, lo), hi) and Max(Min(y, hi), lo);
  shapes.py      numel_of(v) -> the tensor whose element count v computes at runtime;
  reach.py       reaches(v, Reach): the cheap pre-check an anchor passes before a full view.
Commutativity and association are therefore handled locally, per node, in time proportional to
the size of the pattern. Every view records the nodes it walked, which become the match. The
views return new objects and never change the graph or what a caller passes them.

Algebra is the facade the patterns hold: one object with every view's methods.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..graph import GraphIndex, Node
from .casts import CastsView
from .clamp import Bound, Clamp, ClampView, clip_bounds
from .comparison import Comparison, ComparisonView
from .monomial import Monomial, MonomialView, is_zero, product, sum_like
from .reach import Reach, ReachTable
from .reader import MAX_SUM_TERMS, MAX_WALK, GraphReader
from .select import Select, SelectView
from .shapes import NumelView
from .terms import TermsView

__all__ = [
    "MAX_SUM_TERMS", "MAX_WALK", "Algebra", "Bound", "Comparison", "Monomial", "Reach", "Select",
    "clip_bounds", "is_zero", "product", "sum_like",
]


class Algebra:
    """Every view over one GraphIndex; `taken` nodes (already fused) are opaque leaves."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self._reader = GraphReader(index)
        self.products = MonomialView(self._reader)
        self.sums = TermsView(self._reader)
        self.comparisons = ComparisonView(self._reader)
        self.casts = CastsView(self._reader)
        self.clamps = ClampView(self._reader, self.casts)
        self.selects = SelectView(self._reader, self.products, self.comparisons, self.sums)
        self.numels = NumelView(self._reader)
        self.reach_table = ReachTable(index)

    @property
    def taken(self) -> set[int]:
        """Nodes earlier fusions took; the fusion loop adds each match's interior."""
        return self._reader.taken

    @taken.setter
    def taken(self, nodes: set[int]) -> None:
        self._reader.taken = nodes

    @property
    def seen(self) -> set[int]:
        """Nodes the views looked at since the caller last set this."""
        return self._reader.seen

    @seen.setter
    def seen(self, nodes: set[int]) -> None:
        self._reader.seen = nodes

    def producer(self, value: str, *ops: str) -> tuple[int, Node] | None:
        return self._reader.producer(value, *ops)

    def scalar(self, value: str) -> float | None:
        return self._reader.scalar(value)

    def reaches(self, value: str, reach: Reach) -> bool:
        return self.reach_table.reaches(value, reach)

    def reached(self, reaches: tuple[Reach, ...]) -> set[str] | dict[str, int]:
        return self.reach_table.reached(reaches)

    def monomial(self, value: str, stop: frozenset[str] = frozenset(),
                 region: frozenset[int] = frozenset()) -> Monomial:
        return self.products.monomial(value, stop, region)

    def expand_shared(self, monos: Sequence[Monomial], region: set[int], stop: frozenset[str] = frozenset()) -> None:
        """Expands, in the callers' monomials, the factors they share and only they use (the
        pattern modules hold the monomials they pass); products.expanded_shared returns copies."""
        for mono, expanded in zip(monos, self.products.expanded_shared(monos, region, stop)):
            mono.coef, mono.factors = expanded.coef, expanded.factors
            mono.nodes.update(expanded.nodes)

    def regroup(self, mono: Monomial, group: dict[str, int], stop: frozenset[str] = frozenset()
                ) -> tuple[str, set[int], float] | None:
        return self.products.regroup(mono, group, stop)

    def terms(self, value: str) -> tuple[list[tuple[int, str]], set[int]]:
        return self.sums.terms(value)

    def select(self, value: str) -> Select | None:
        return self.selects.select(value)

    def compare(self, cond: str) -> Comparison | None:
        return self.comparisons.compare(cond)

    def clamp(self, value: str) -> Clamp | None:
        return self.clamps.clamp(value)

    def bound_value(self, bound: Bound) -> float | None:
        return self.clamps.bound_value(bound)

    def unary(self, value: str, op: str) -> tuple[str, int] | None:
        return self.casts.unary(value, op)

    def unary_narrowed(self, value: str, op: str) -> tuple[str, set[int]] | None:
        return self.casts.unary_narrowed(value, op)

    def uncast(self, value: str) -> tuple[str, int, int] | None:
        return self.casts.uncast(value)

    def widened(self, value: str) -> str:
        return self.casts.widened(value)

    def widening_casts(self, value: str) -> set[int]:
        return self.casts.widening_casts(value)

    def narrowed(self, value: str, to: int | None) -> tuple[str, set[int]] | None:
        return self.casts.narrowed(value, to)

    def numel_of(self, value: str) -> tuple[str, set[int]] | None:
        return self.numels.numel_of(value)
