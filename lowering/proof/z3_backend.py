"""The semantics' z3 backend: reals and bools as z3 terms, Python values folded where they appear.

z3 is imported here only, and only when a proof is run: `lower` on a model with nothing to prove
does not load it.

Terms are made through z3's C API (Z3_mk_*) rather than its Python operators: the operators
check and coerce the sorts of their operands on every call, which made building a query cost as
much as deciding it. Every term here is a real or a bool of one context, so no coercion is due;
operands keep the order given (the operators put a numeral first in a comparison with one).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import z3


def _is_py(x: object) -> bool:
    return isinstance(x, (bool, int, Fraction))


class Z3Backend:
    def __init__(self, ctx: z3.Context) -> None:
        self.ctx = ctx
        self._ref = self.ctx.ref()
        self._fresh = 0
        self.fresh_names: list[str] = []
        self._nums: dict[Fraction | int, z3.ArithRef] = {}

    def num(self, value: Fraction | int) -> Any:
        found = self._nums.get(value)  # an int and the Fraction equal to it are one key
        if found is None:
            v = Fraction(value)
            found = self._nums[v] = z3.RealVal(f"{v.numerator}/{v.denominator}", self.ctx)
        return found

    def real(self, name: str) -> Any:
        return z3.Real(name, self.ctx)

    def kind(self, name: str) -> Any:
        # kinds are reals holding 0..3: the formula stays in real arithmetic (QF_NRA), which z3
        # decides much faster than a mix of integers and reals
        return z3.Real(name, self.ctx)

    def _r(self, a: Any) -> Any:
        return self.num(a) if isinstance(a, (int, Fraction)) and not isinstance(a, bool) else a

    def _real_term(self, ast: Any) -> z3.ArithRef:
        return z3.ArithRef(ast, self.ctx)

    def _bool_term(self, ast: Any) -> z3.BoolRef:
        return z3.BoolRef(ast, self.ctx)

    def _array(self, xs: list[Any]) -> Any:
        arr = (z3.Ast * len(xs))()
        for i, x in enumerate(xs):
            arr[i] = x.as_ast()
        return arr

    def add(self, a: Any, b: Any) -> Any:
        return self._real_term(z3.Z3_mk_add(self._ref, 2, self._array([self._r(a), self._r(b)])))

    def mul(self, a: Any, b: Any) -> Any:
        return self._real_term(z3.Z3_mk_mul(self._ref, 2, self._array([self._r(a), self._r(b)])))

    def div(self, a: Any, b: Any) -> Any:
        return self._real_term(z3.Z3_mk_div(self._ref, self._r(a).as_ast(), self._r(b).as_ast()))

    def neg(self, a: Any) -> Any:
        return self._real_term(z3.Z3_mk_unary_minus(self._ref, self._r(a).as_ast()))

    def lt(self, a: Any, b: Any) -> Any:
        return self._bool_term(z3.Z3_mk_lt(self._ref, self._r(a).as_ast(), self._r(b).as_ast()))

    def eq(self, a: Any, b: Any) -> Any:
        if _is_py(a) and _is_py(b):
            return a == b
        return self._bool_term(z3.Z3_mk_eq(self._ref, self._r(a).as_ast(), self._r(b).as_ast()))

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        if isinstance(c, bool):
            return a if c else b
        if _is_py(a) and _is_py(b) and a == b and type(a) is type(b):
            return a
        if isinstance(a, bool) or isinstance(b, bool):
            a = z3.BoolVal(a, self.ctx) if isinstance(a, bool) else a
            b = z3.BoolVal(b, self.ctx) if isinstance(b, bool) else b
            wrap = self._bool_term
        else:
            a, b = self._r(a), self._r(b)
            wrap = self._bool_term if isinstance(a, z3.BoolRef) else self._real_term
        return wrap(z3.Z3_mk_ite(self._ref, c.as_ast(), a.as_ast(), b.as_ast()))

    def and_(self, *xs: Any) -> Any:
        if any(x is False for x in xs):
            return False
        rest = [x for x in xs if x is not True]
        if not rest:
            return True
        return rest[0] if len(rest) == 1 else self._bool_term(z3.Z3_mk_and(self._ref, len(rest), self._array(rest)))

    def or_(self, *xs: Any) -> Any:
        if any(x is True for x in xs):
            return True
        rest = [x for x in xs if x is not False]
        if not rest:
            return False
        return rest[0] if len(rest) == 1 else self._bool_term(z3.Z3_mk_or(self._ref, len(rest), self._array(rest)))

    def not_(self, a: Any) -> Any:
        return (not a) if isinstance(a, bool) else self._bool_term(z3.Z3_mk_not(self._ref, a.as_ast()))

    def fresh_bool(self, hint: str) -> Any:
        self._fresh += 1
        name = f"open_{self._fresh}"
        self.fresh_names.append(hint)
        return z3.Bool(name, self.ctx)
