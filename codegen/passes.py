"""Generic IR passes: scalar folding, algebraic simplification, CSE and dead-code elimination.

Every rewrite keeps the IR semantics (codegen/ir.py) exactly on every lane whose result is
defined; a rewrite may only pin down a lane the semantics leave unspecified (a Maxs/Mins result
on a NaN lane). The rules:

    SConst-only scalar op            -> SConst (exact float32 evaluation)
    SMul(a, 1), SMul(1, a)           -> a
    Muls(x, 1), Adds(x, -0)          -> x               (exact, signed zeros included)
    Mul(x, Duplicate(s)), Add(...)   -> Muls(x, s), Adds(x, s)     (either operand order)
    Sub(x, Duplicate(c)), c constant -> Adds(x, -c)     (x - c == x + (-c) in IEEE)
    Mins(Maxs(x, a), b), a >= b      -> Duplicate(b)    (constant clamp with an empty range)
    Maxs(Mins(x, b), a), a >= b      -> Duplicate(a)
    Mins(Abs(x), c), c < 0           -> Duplicate(c)    (|x| >= +0 > c)
    Compare(Abs(x), +-0, GE)         -> Compare(x, x, EQ)   (both mean "x is not NaN")
    Select(m, a, a)                  -> a
    identical pure instructions      -> one (CSE)
    values no CopyOut depends on     -> removed (DCE)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from codegen.ir import (
    SCALAR_BINARY,
    SCALAR_UNARY,
    Instr,
    Kernel,
    Kind,
    Op,
    f32,
    is_attr,
    make_attrs,
    verify,
)
from codegen.scalar_eval import eval_scalar


@dataclass
class _Rewriter:
    """Builds a new instruction list; `emit` deduplicates identical pure instructions."""

    instrs: list[Instr] = field(default_factory=list)
    seen: dict[tuple, int] = field(default_factory=dict)

    def emit(self, ins: Instr) -> int:
        key = (ins.op, ins.dtype, ins.kind, ins.srcs, repr(ins.attrs))
        if ins.op is not Op.COPY_OUT and key in self.seen:
            return self.seen[key]
        self.instrs.append(ins)
        self.seen[key] = len(self.instrs) - 1
        return len(self.instrs) - 1

    def const(self, v: int) -> float | None:
        ins = self.instrs[v]
        # an attribute SConst is a host value, not a constant: folding it would bake one node's
        # attribute into a kernel that serves every value
        if ins.op is not Op.SCONST or is_attr(ins):
            return None
        return ins.attr("value")  # type: ignore[return-value]

    def sconst(self, value: float) -> int:
        return self.emit(Instr(Op.SCONST, "float32", Kind.SCALAR, (), make_attrs(value=f32(value))))

    def tile(self, op: Op, *srcs: int, **attrs: object) -> int:
        return self.emit(Instr(op, "float32", Kind.TILE, tuple(srcs), make_attrs(**attrs)))


def _is_bits(v: float | None, target: float) -> bool:
    """Equal including the sign of zero (so -0 is not +0)."""
    return v is not None and v == target and math.copysign(1, v) == math.copysign(1, target)


def _fold_scalar(rw: _Rewriter, ins: Instr) -> int | None:
    if ins.op not in SCALAR_BINARY and ins.op not in SCALAR_UNARY:
        return None
    vals = [rw.const(s) for s in ins.srcs]
    if all(v is not None for v in vals):
        return rw.sconst(eval_scalar(ins.op, *vals))  # type: ignore[arg-type]
    if ins.op is Op.SMUL:
        for keep, one in ((0, 1), (1, 0)):
            if _is_bits(vals[one], 1.0):
                return ins.srcs[keep]
    return None


def _simplify_tile(rw: _Rewriter, ins: Instr) -> int | None:
    op, srcs = ins.op, ins.srcs
    src = [rw.instrs[s] for s in srcs]
    if op is Op.MULS and _is_bits(rw.const(srcs[1]), 1.0):
        return srcs[0]
    if op is Op.ADDS and _is_bits(rw.const(srcs[1]), -0.0):
        return srcs[0]
    if op in (Op.MUL, Op.ADD):
        scalar_op = Op.MULS if op is Op.MUL else Op.ADDS
        for t, d in ((0, 1), (1, 0)):
            if src[d].op is Op.DUPLICATE:
                return rw.tile(scalar_op, srcs[t], src[d].srcs[0])
    if op is Op.SUB and src[1].op is Op.DUPLICATE:
        c = rw.const(src[1].srcs[0])
        if c is not None:
            return rw.tile(Op.ADDS, srcs[0], rw.sconst(-c))
    if op in (Op.MINS, Op.MAXS) and src[0].op in (Op.MAXS, Op.MINS) and src[0].op is not op:
        outer, inner = rw.const(srcs[1]), rw.const(src[0].srcs[1])
        if outer is not None and inner is not None:
            lo, hi = (inner, outer) if op is Op.MINS else (outer, inner)
            if lo >= hi:
                return rw.tile(Op.DUPLICATE, srcs[1])
    if op is Op.MINS and src[0].op is Op.ABS:
        c = rw.const(srcs[1])
        if c is not None and c < 0:
            return rw.tile(Op.DUPLICATE, srcs[1])
    if op is Op.COMPARE and src[0].op is Op.ABS and ins.attr("mode") == "GE":
        c = rw.const(srcs[1])
        if c is not None and c == 0:
            x = src[0].srcs[0]
            return rw.emit(Instr(Op.COMPARE, ins.dtype, ins.kind, (x, x), make_attrs(mode="EQ")))
    if op is Op.SELECT and srcs[1] == srcs[2]:
        return srcs[1]
    return None


def _rewrite(k: Kernel) -> Kernel:
    rw = _Rewriter()
    remap: dict[int, int] = {}
    for i, ins in enumerate(k.instrs):
        ins = Instr(ins.op, ins.dtype, ins.kind, tuple(remap[s] for s in ins.srcs), ins.attrs)
        rep = _fold_scalar(rw, ins)
        if rep is None and ins.kind in (Kind.TILE, Kind.MASK):
            rep = _simplify_tile(rw, ins)
        remap[i] = rep if rep is not None else rw.emit(ins)
    return replace(k, instrs=tuple(rw.instrs))


def eliminate_dead_code(k: Kernel) -> Kernel:
    """Keep only instructions a CopyOut depends on; scalars first, otherwise in order.

    Scalars never depend on tiles, so hoisting them keeps SSA order and puts all per-launch work
    ahead of the per-tile work, as the emitted kernel runs it.
    """
    live: set[int] = set()
    for i in range(len(k.instrs) - 1, -1, -1):
        if k.instrs[i].op is Op.COPY_OUT or i in live:
            live.add(i)
            live.update(k.instrs[i].srcs)
    order = sorted(live, key=lambda i: (k.instrs[i].kind is not Kind.SCALAR, i))
    new_id = {old: n for n, old in enumerate(order)}
    instrs = tuple(
        Instr(
            k.instrs[i].op,
            k.instrs[i].dtype,
            k.instrs[i].kind,
            tuple(new_id[s] for s in k.instrs[i].srcs),
            k.instrs[i].attrs,
        )
        for i in order
    )
    return replace(k, instrs=instrs)


def _fixed_point_key(k: Kernel) -> tuple:
    """The instructions with attributes by repr: equal exactly when the kernels print the same
    (a NaN SConst != itself, so Instr == cannot tell), at a fraction of format_kernel's cost."""
    return tuple((i.op, i.dtype, i.kind, i.srcs, repr(i.attrs)) for i in k.instrs)


def optimize(k: Kernel, max_rounds: int = 8) -> Kernel:
    """Fold, simplify, CSE and DCE until nothing changes; the result is verified."""
    key = _fixed_point_key(k)
    for _ in range(max_rounds):
        nxt = eliminate_dead_code(_rewrite(k))
        nxt_key = _fixed_point_key(nxt)
        done = nxt_key == key
        k, key = nxt, nxt_key
        if done:
            break
    verify(k)
    return k
