"""The semantics' z3 backend: reals and bools as z3 terms, Python values folded where they appear.

z3 is imported here only, and only when a proof is run: `lower` on a model with nothing to prove
does not load it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import z3


def _is_py(x: object) -> bool:
    return isinstance(x, (bool, int, Fraction))


class Z3Backend:
    def __init__(self, ctx: z3.Context | None = None) -> None:
        self.ctx = ctx
        self._fresh = 0
        self.fresh_names: list[str] = []

    def num(self, value: Fraction | int) -> Any:
        v = Fraction(value)
        return z3.RealVal(f"{v.numerator}/{v.denominator}", self.ctx)

    def real(self, name: str) -> Any:
        return z3.Real(name, self.ctx)

    def kind(self, name: str) -> Any:
        return z3.Int(name, self.ctx)

    def _r(self, a: Any) -> Any:
        return self.num(a) if isinstance(a, (int, Fraction)) and not isinstance(a, bool) else a

    def add(self, a: Any, b: Any) -> Any:
        return self._r(a) + self._r(b)

    def mul(self, a: Any, b: Any) -> Any:
        return self._r(a) * self._r(b)

    def div(self, a: Any, b: Any) -> Any:
        return self._r(a) / self._r(b)

    def neg(self, a: Any) -> Any:
        return -self._r(a)

    def lt(self, a: Any, b: Any) -> Any:
        return self._r(a) < self._r(b)

    def eq(self, a: Any, b: Any) -> Any:
        if _is_py(a) and _is_py(b):
            return a == b
        if isinstance(a, int) and not isinstance(a, bool) and z3.is_int(b):
            return b == z3.IntVal(a, self.ctx)
        if isinstance(b, int) and not isinstance(b, bool) and z3.is_int(a):
            return a == z3.IntVal(b, self.ctx)
        return self._r(a) == self._r(b)

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        if isinstance(c, bool):
            return a if c else b
        if _is_py(a) and _is_py(b) and a == b and type(a) is type(b):
            return a
        if isinstance(a, int) and not isinstance(a, bool) and isinstance(b, int) and not isinstance(b, bool):
            return z3.If(c, z3.IntVal(a, self.ctx), z3.IntVal(b, self.ctx))
        if isinstance(a, int) and not isinstance(a, bool) and z3.is_int(b):
            a = z3.IntVal(a, self.ctx)
        elif isinstance(b, int) and not isinstance(b, bool) and z3.is_int(a):
            b = z3.IntVal(b, self.ctx)
        elif isinstance(a, bool) or isinstance(b, bool):
            a = z3.BoolVal(a, self.ctx) if isinstance(a, bool) else a
            b = z3.BoolVal(b, self.ctx) if isinstance(b, bool) else b
        else:
            a, b = self._r(a), self._r(b)
        return z3.If(c, a, b)

    def and_(self, *xs: Any) -> Any:
        if any(x is False for x in xs):
            return False
        rest = [x for x in xs if x is not True]
        if not rest:
            return True
        return rest[0] if len(rest) == 1 else z3.And(*rest)

    def or_(self, *xs: Any) -> Any:
        if any(x is True for x in xs):
            return True
        rest = [x for x in xs if x is not False]
        if not rest:
            return False
        return rest[0] if len(rest) == 1 else z3.Or(*rest)

    def not_(self, a: Any) -> Any:
        return (not a) if isinstance(a, bool) else z3.Not(a)

    def fresh_bool(self, hint: str) -> Any:
        self._fresh += 1
        name = f"open_{self._fresh}"
        self.fresh_names.append(hint)
        return z3.Bool(name, self.ctx)
