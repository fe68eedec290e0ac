"""The product view: a value as coefficient * product of runtime factors with integer exponents,
seen through Mul, Div, Neg and Reciprocal, so g*x/b, x*(g/b), (x/b)*g and Mul(x, 1/b)*g all look
alike."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .reader import FLOAT_TYPES, MAX_WALK, PRODUCT_OPS, GraphReader


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


class MonomialView:
    def __init__(self, reader: GraphReader) -> None:
        self._reader = reader

    def monomial(self, value: str, stop: frozenset[str] = frozenset(),
                 region: frozenset[int] = frozenset()) -> Monomial:
        """The product view of value. The walk enters a producer only when every use of its
        output lies inside the walk (or `region`), so values the rest of the graph also reads,
        like a shared delta, stay factors instead of dissolving into the match."""
        reader = self._reader
        index = reader.index
        producers, consumers, all_nodes = index.producer, index.consumers, index.nodes
        taken, seen, graph_outputs = reader.taken, reader.seen, index.graph_outputs
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
                if c is not None and index.elem_type(v) in FLOAT_TYPES:
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
                if (op not in PRODUCT_OPS or node.domain not in ("", "ai.onnx")
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

    def expanded_shared(self, monos: Sequence[Monomial], region: set[int], stop: frozenset[str] = frozenset()
                        ) -> list[Monomial]:
        """Copies of monos with the factors they share, and only they use, expanded (g = dout * norm,
        read by both branches of a select), until nothing more can be expanded."""
        result = [Monomial(m.coef, dict(m.factors), set(m.nodes)) for m in monos]
        reader = self._reader
        changed = True
        while changed:
            changed = False
            inside = frozenset(region.union(*(m.nodes for m in result)))
            for mono in result:
                for name, exp in list(mono.factors.items()):
                    if name in stop or not reader.is_product(name) or not reader.owned(name, set(), inside):
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
        return result

    def regroup(self, mono: Monomial, group: dict[str, int], stop: frozenset[str] = frozenset()
                ) -> tuple[str, set[int], float] | None:
        """(value, its nodes, c) for a node walked by `mono` that computes c * prod(group).

        The product walk is greedy: when an input such as delta is itself a product computed
        upstream, its factors spill into the monomial. This finds the upstream value again so
        it can stay outside the match; the caller divides its own coefficient by c.
        """
        for i in sorted(mono.nodes):
            out = self._reader.index.nodes[i].output[0]
            sub = self.monomial(out, stop)
            if sub.factors == group and sub.coef != 0 and math.isfinite(sub.coef):
                return out, sub.nodes, sub.coef
        return None

    def opened(self, term: Monomial) -> Monomial:
        """term with each factor that is a product (shared with other terms, so the walk left it
        whole) replaced by its own product view."""
        for name, exp in list(term.factors.items()):
            if exp != 1 or not self._reader.is_product(name):
                continue
            sub = self.monomial(name)
            if sub.nodes:
                term = product(term.dividing_out(name), sub)
        return term
