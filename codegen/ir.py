"""Kernel IR: a small SSA DAG of AscendC vector instructions over tiles plus scalar computations.

This module is the single source of truth for what a kernel computes: the emitter turns every
instruction into one AscendC call, and the CPU backend (runtime/) interprets the same instructions.
The numeric semantics below are therefore normative for both.

Structure
---------
A `Kernel` has parameters (inputs and outputs, each with a dtype) and a tuple of `Instr`.
Instruction i defines the value with id i (SSA: defined once, used only after its definition);
`CopyOut` defines no value. Every value has a dtype and a kind:

    tile    a UB buffer of `count` lanes (float32, float16 or bfloat16)
    mask    a Compare bitmask (dtype "uint8"), one bit per lane
    scalar  a float32 computed once per launch, on the host (tiling time) or the AI Core scalar
            unit; never per element

Parameters: an input is either `tile` (streamed element by element with the output) or `scalar`
(holds exactly one element; read by SInput or CopyInBrc). A `tile` input marked `broadcast` has a
shape that broadcasts to the output's (numpy rules, rank <= 8) and is read by CopyInBcast only;
its shape is known at tiling time, never to the kernel. Outputs are streamed tiles.

Execution model
---------------
The scheduler (codegen/schedule.py) splits the N output elements into per-core ranges and each
range into tiles. For a tile covering GM elements [off, off + n), every vector instruction runs
over `count = round_up(n, granule)` lanes, granule = 256 bytes / 4 = 64 lanes, so Compare always
covers whole 256-byte repeats. Lanes n..count-1 hold unspecified values (an interpreter may fill
them with zeros); nothing computed in them is ever stored. Scalars are evaluated once, before the
first tile, in instruction order.

Numeric semantics (AscendC, A2/A3/950 with the INF/NaN overflow mode)
---------------------------------------------------------------------
All arithmetic is IEEE-754 binary32 with round-to-nearest-even, exactly what numpy float32
operations give; no flush-to-zero is modelled. Per op ("t" = tile operand, "s" = scalar):

    CopyIn  name          lanes [0, n) = GM[name][off : off + n] in the input's dtype
                          (DataCopy for whole 32-byte blocks, DataCopyPad for a tail).
    CopyInBrc name        every lane = element 0 of the one-element input `name`.
    CopyInBcast name      lanes [0, n) = GM[name][b(off + j)] for j < n, where b maps a flat index
                          of the output shape to the flat index of the element of the broadcast
                          input `name` that numpy's broadcasting puts there (codegen/broadcast.py
                          computes b from the shapes on the host).
    Cast    t round=R     float16/bfloat16 -> float32 with CAST_NONE: exact.
                          float32 -> float16/bfloat16 with CAST_RINT: round half to even;
                          out-of-range -> +-inf, NaN -> NaN. A same-dtype Cast is invalid (on the
                          hardware a float32->float32 Cast rounds to an integer); the verifier
                          rejects it.
    Add/Sub/Mul/Div t, t  lane-wise IEEE binary32 (Div is a true division).
    Abs     t             clears the sign bit (|NaN| is NaN, |-0| = +0).
    Sign    t             -1.0 for x < 0, +1.0 for x > 0, +0.0 for x = +-0 **and for NaN**
                          (AscendC Sign; its doc example maps nan to 0). Its source and
                          destination must not share a buffer.
    Muls/Adds t, s        t * s, t + s lane-wise.
    Maxs/Mins t, s        max(x, s), min(x, s) for non-NaN x. The result for a NaN lane is
                          undocumented on the hardware: a lowering must not let it decide an
                          observable result (the interpreter may return NaN or s there).
    Compare a, b mode=M   b is a tile (AscendC Compare) or a scalar (Compares). Bit i of the
                          result is 1 iff (a_i M b_i) holds, M in LT GT EQ LE GE NE, with
                          IEEE ordered comparison: with a NaN operand LT/GT/EQ/LE/GE give 0
                          and NE gives 1 (assumed; the AscendC docs do not state NaN compare
                          results). Bits are packed little-endian: lane i is bit (i % 8) of
                          byte (i // 8). Operands are float32; count * 4 is a multiple of 256.
    Select  m, t0, x1 mode=M
                          lane i = t0_i where mask bit i is 1, else x1_i (a bitwise pick, no
                          arithmetic). M = TENSOR_TENSOR (x1 a tile) or TENSOR_SCALAR (x1 a
                          scalar), AscendC VSEL_TENSOR_TENSOR_MODE / VSEL_TENSOR_SCALAR_MODE;
                          both consume the mask continuously over the lanes.
    Duplicate s           every lane = s.
    CopyOut name, t       GM[name][off : off + n] = lanes [0, n) of t (t has the output's dtype).

Scalar ops (all results float32, evaluated in instruction order):

    SConst value          a compile-time constant, stored already rounded to float32.
    SConst value attr=A   the fused node's float attribute A (value: this node's, rounded to
                          float32). The emitted operator reads it at tiling time, so it is a
                          host value and never folded: one kernel serves every value of A.
    SInput name           element 0 of the one-element input `name`, converted exactly to float32.
    SNumel name           number of elements of input `name`, converted to float32 (RNE); known at
                          tiling time, so it makes the scalar a host (tiling) value.
    SAdd/SSub/SMul/SDiv a, b   IEEE binary32 (x / 0 gives +-inf or NaN as IEEE says).
    SNeg a                -a (flips the sign bit).
    SRecip a              1 / a (IEEE binary32).
    SMax a, b             a if (a > b or a is NaN) else b.
    SMin a, b             a if (a < b or a is NaN) else b.

Where a scalar is evaluated (its "stage", see `scalar_stages`): `const` if it depends on SConst
only (the folding pass turns it into one SConst), `host` if it depends on SNumel or an attribute
SConst (computed by the
tiling function and passed in the tiling data), `kernel` if it depends on SInput (computed on the
AI Core scalar unit after reading the input).

Text form
---------
One instruction a line, deterministic, read back by `parse_kernel` (grammar in `format_kernel`).
SmoothL1LossGradV2 for float16 with a one-element dout (reduction mean) prints as:

    kernel SmoothL1LossGradV2 float16
      input predict: float16 tile
      input label: float16 tile
      input dout: float16 scalar
      output gradient: float16
      $0 = SInput dout : scalar<float32>
      $1 = SNumel predict : scalar<float32>
      $2 = SRecip $1 : scalar<float32>
      $3 = SMul $0, $2 : scalar<float32>
      $4 = SConst 0.5 : scalar<float32>
      $5 = SConst 2 : scalar<float32>
      %6 = CopyIn predict : tile<float16>
      %7 = Cast %6 round=CAST_NONE : tile<float32>
      %8 = CopyIn label : tile<float16>
      %9 = Cast %8 round=CAST_NONE : tile<float32>
      %10 = Sub %7, %9 : tile<float32>
      %11 = Abs %10 : tile<float32>
      %12 = Compare %11, $4 mode=GE : mask
      %13 = Sign %10 : tile<float32>
      %14 = Muls %10, $5 : tile<float32>
      %15 = Select %12, %13, %14 mode=TENSOR_TENSOR : tile<float32>
      %16 = Muls %15, $3 : tile<float32>
      %17 = Cast %16 round=CAST_RINT : tile<float16>
      CopyOut gradient, %17
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import cast

import numpy as np

from contracts.errors import InternalError

F32 = "float32"
F16 = "float16"
BF16 = "bfloat16"
MASK_DTYPE = "uint8"
FLOAT_DTYPES = (F32, F16, BF16)
DTYPE_BYTES = {F32: 4, F16: 2, BF16: 2, MASK_DTYPE: 1}

GRANULE_BYTES = 256  # one vector repeat
LANES_PER_REPEAT = GRANULE_BYTES // DTYPE_BYTES[F32]


class Kind(str, Enum):
    TILE = "tile"
    MASK = "mask"
    SCALAR = "scalar"


class Op(str, Enum):
    # data movement
    COPY_IN = "CopyIn"
    COPY_IN_BRC = "CopyInBrc"
    COPY_IN_BCAST = "CopyInBcast"
    COPY_OUT = "CopyOut"
    # tile compute (one AscendC vector call each)
    CAST = "Cast"
    ADD = "Add"
    SUB = "Sub"
    MUL = "Mul"
    DIV = "Div"
    ABS = "Abs"
    SIGN = "Sign"
    MULS = "Muls"
    ADDS = "Adds"
    MAXS = "Maxs"
    MINS = "Mins"
    COMPARE = "Compare"
    SELECT = "Select"
    DUPLICATE = "Duplicate"
    # scalar (host or scalar unit)
    SCONST = "SConst"
    SINPUT = "SInput"
    SNUMEL = "SNumel"
    SADD = "SAdd"
    SSUB = "SSub"
    SMUL = "SMul"
    SDIV = "SDiv"
    SNEG = "SNeg"
    SRECIP = "SRecip"
    SMAX = "SMax"
    SMIN = "SMin"


TILE_BINARY = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV})
TILE_UNARY = frozenset({Op.ABS, Op.SIGN})
TILE_SCALAR = frozenset({Op.MULS, Op.ADDS, Op.MAXS, Op.MINS})
SCALAR_BINARY = frozenset({Op.SADD, Op.SSUB, Op.SMUL, Op.SDIV, Op.SMAX, Op.SMIN})
SCALAR_UNARY = frozenset({Op.SNEG, Op.SRECIP})
SCALAR_OPS = frozenset({Op.SCONST, Op.SINPUT, Op.SNUMEL}) | SCALAR_BINARY | SCALAR_UNARY
# Ops that are one AscendC vector instruction over a tile (data movement excluded).
VECTOR_OPS = TILE_BINARY | TILE_UNARY | TILE_SCALAR | {Op.CAST, Op.COMPARE, Op.SELECT, Op.DUPLICATE}

CMP_MODES = ("LT", "GT", "EQ", "LE", "GE", "NE")
SELECT_MODES = ("TENSOR_TENSOR", "TENSOR_SCALAR")
ROUND_MODES = ("CAST_NONE", "CAST_RINT")


class IRError(InternalError, ValueError):
    """An ill-formed kernel: the message names the instruction and the rule it breaks."""


@dataclass(frozen=True)
class Param:
    """A kernel input or output. kind is TILE (streamed) or SCALAR (one element, inputs only);
    a TILE input with `broadcast` broadcasts to the output's shape (read by CopyInBcast)."""

    name: str
    dtype: str
    kind: Kind = Kind.TILE
    broadcast: bool = False


@dataclass(frozen=True)
class Instr:
    """One instruction. srcs are value ids (indices of earlier instructions).

    attrs is a sorted tuple of (key, value) pairs so instructions are hashable and print
    deterministically. Keys used: name (CopyIn, CopyInBrc, CopyOut, SInput, SNumel), value
    (SConst, a float already rounded to float32), round (Cast), mode (Compare, Select).
    """

    op: Op
    dtype: str | None  # None only for CopyOut
    kind: Kind | None
    srcs: tuple[int, ...] = ()
    attrs: tuple[tuple[str, object], ...] = ()

    def attr(self, key: str) -> object:
        for k, v in self.attrs:
            if k == key:
                return v
        raise KeyError(key)


@dataclass(frozen=True)
class Kernel:
    """A kernel: op type it implements, parameters and instructions.

    dtype is the tensor dtype of the fused node (the kernel variant's data type); `variant` is
    the rest of its specialisation, (axis, value) pairs of codegen/variants.py that the emitted
    operator's tiling function recomputes from the call's attributes and shapes.
    """

    op_type: str
    dtype: str
    inputs: tuple[Param, ...]
    outputs: tuple[Param, ...]
    instrs: tuple[Instr, ...]
    variant: tuple[tuple[str, str], ...] = ()

    def param(self, name: str) -> Param:
        for p in self.inputs + self.outputs:
            if p.name == name:
                return p
        raise KeyError(name)

    def users(self) -> dict[int, list[int]]:
        """value id -> ids of the instructions that read it, in order."""
        out: dict[int, list[int]] = {i: [] for i in range(len(self.instrs))}
        for i, ins in enumerate(self.instrs):
            for s in ins.srcs:
                out[s].append(i)
        return out

    def vector_instruction_count(self) -> int:
        """AscendC vector compute calls per tile (data movement and scalar work excluded)."""
        return sum(1 for ins in self.instrs if ins.op in VECTOR_OPS)


def f32(value: float) -> float:
    """Round a Python float to the nearest float32 (what SConst stores)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def make_attrs(**kw: object) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(kw.items()))


@dataclass
class KernelBuilder:
    """Appends instructions and returns value ids; `build()` verifies the result."""

    op_type: str
    dtype: str
    variant: tuple[tuple[str, str], ...] = ()
    inputs: list[Param] = field(default_factory=list)
    outputs: list[Param] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)

    def input(self, name: str, dtype: str, kind: Kind = Kind.TILE, broadcast: bool = False) -> str:
        self.inputs.append(Param(name, dtype, kind, broadcast))
        return name

    def output(self, name: str, dtype: str) -> str:
        self.outputs.append(Param(name, dtype, Kind.TILE))
        return name

    def emit(self, ins: Instr) -> int:
        self.instrs.append(ins)
        return len(self.instrs) - 1

    # scalars
    def sconst(self, value: float) -> int:
        return self.emit(Instr(Op.SCONST, F32, Kind.SCALAR, (), make_attrs(value=f32(value))))

    def sattr(self, attr: str, value: float) -> int:
        """The node attribute `attr` (this node's value), read by the host at tiling time."""
        return self.emit(
            Instr(Op.SCONST, F32, Kind.SCALAR, (), make_attrs(attr=attr, value=f32(value)))
        )

    def sinput(self, name: str) -> int:
        return self.emit(Instr(Op.SINPUT, F32, Kind.SCALAR, (), make_attrs(name=name)))

    def snumel(self, name: str) -> int:
        return self.emit(Instr(Op.SNUMEL, F32, Kind.SCALAR, (), make_attrs(name=name)))

    def sop(self, op: Op, *srcs: int) -> int:
        return self.emit(Instr(op, F32, Kind.SCALAR, tuple(srcs)))

    # tiles
    def copy_in(self, name: str) -> int:
        dtype = self._param(name).dtype
        return self.emit(Instr(Op.COPY_IN, dtype, Kind.TILE, (), make_attrs(name=name)))

    def copy_in_bcast(self, name: str) -> int:
        dtype = self._param(name).dtype
        return self.emit(Instr(Op.COPY_IN_BCAST, dtype, Kind.TILE, (), make_attrs(name=name)))

    def copy_in_brc(self, name: str) -> int:
        dtype = self._param(name).dtype
        return self.emit(Instr(Op.COPY_IN_BRC, dtype, Kind.TILE, (), make_attrs(name=name)))

    def cast(self, src: int, dtype: str) -> int:
        rnd = "CAST_NONE" if dtype == F32 else "CAST_RINT"
        return self.emit(Instr(Op.CAST, dtype, Kind.TILE, (src,), make_attrs(round=rnd)))

    def unary(self, op: Op, src: int) -> int:
        return self.emit(Instr(op, F32, Kind.TILE, (src,)))

    def binary(self, op: Op, a: int, b: int) -> int:
        return self.emit(Instr(op, F32, Kind.TILE, (a, b)))

    def tile_scalar(self, op: Op, t: int, s: int) -> int:
        return self.emit(Instr(op, F32, Kind.TILE, (t, s)))

    def compare(self, a: int, b: int, mode: str) -> int:
        return self.emit(Instr(Op.COMPARE, MASK_DTYPE, Kind.MASK, (a, b), make_attrs(mode=mode)))

    def select(self, mask: int, src0: int, src1: int) -> int:
        mode = "TENSOR_SCALAR" if self.instrs[src1].kind is Kind.SCALAR else "TENSOR_TENSOR"
        return self.emit(
            Instr(Op.SELECT, F32, Kind.TILE, (mask, src0, src1), make_attrs(mode=mode))
        )

    def duplicate(self, s: int) -> int:
        return self.emit(Instr(Op.DUPLICATE, F32, Kind.TILE, (s,)))

    def copy_out(self, name: str, src: int) -> int:
        return self.emit(Instr(Op.COPY_OUT, None, None, (src,), make_attrs(name=name)))

    def _param(self, name: str) -> Param:
        for p in self.inputs:
            if p.name == name:
                return p
        raise IRError(f"no input named {name!r}")

    def build(self) -> Kernel:
        k = Kernel(
            self.op_type,
            self.dtype,
            tuple(self.inputs),
            tuple(self.outputs),
            tuple(self.instrs),
            self.variant,
        )
        verify(k)
        return k


# ----------------------------------------------------------------------------------- verifier


def _fail(i: int, ins: Instr, why: str) -> None:
    raise IRError(f"instruction {i} ({ins.op.value}): {why}")


def _check_param_names(k: Kernel) -> None:
    names = [p.name for p in k.inputs + k.outputs]
    if len(set(names)) != len(names):
        raise IRError(f"duplicate parameter names in {names}")
    for p in k.inputs + k.outputs:
        if not p.name.isidentifier() or not p.name.isascii():
            raise IRError(f"parameter name {p.name!r} is not an ASCII identifier")
        if p.dtype not in FLOAT_DTYPES:
            raise IRError(f"parameter {p.name!r} has unsupported dtype {p.dtype!r}")
    for p in k.outputs:
        if p.kind is not Kind.TILE or p.broadcast:
            raise IRError(f"output {p.name!r} must be a tile of the output shape")
    for p in k.inputs:
        if p.broadcast and p.kind is not Kind.TILE:
            raise IRError(f"broadcast input {p.name!r} must be a tile input")


def verify(k: Kernel) -> None:
    """Raise IRError unless `k` is well formed (SSA, kinds, dtypes, attributes, outputs)."""
    _check_param_names(k)
    inputs = {p.name: p for p in k.inputs}
    outputs = {p.name: p for p in k.outputs}
    written: set[str] = set()
    for i, ins in enumerate(k.instrs):
        if not isinstance(ins.op, Op):
            raise IRError(f"instruction {i}: unknown op {ins.op!r}")
        for s in ins.srcs:
            if not isinstance(s, int) or not 0 <= s < i:
                _fail(i, ins, f"operand {s!r} is not an earlier value (SSA)")
            if k.instrs[s].kind is None:
                _fail(i, ins, f"operand {s} defines no value")
        src = [k.instrs[s] for s in ins.srcs]
        _verify_one(i, ins, src, inputs, outputs, written)
    missing = set(outputs) - written
    if missing:
        raise IRError(f"outputs never written: {sorted(missing)}")


def _expect(i: int, ins: Instr, n: int, src: list[Instr]) -> None:
    if len(src) != n:
        _fail(i, ins, f"expects {n} operands, got {len(src)}")


def _is_f32(x: Instr, kind: Kind) -> bool:
    return x.kind is kind and x.dtype == F32


def _verify_one(
    i: int,
    ins: Instr,
    src: list[Instr],
    inputs: dict[str, Param],
    outputs: dict[str, Param],
    written: set[str],
) -> None:
    op = ins.op
    keys = tuple(k for k, _ in ins.attrs)
    if list(keys) != sorted(keys):
        _fail(i, ins, "attributes must be sorted by key")
    if op in SCALAR_OPS:
        if ins.kind is not Kind.SCALAR or ins.dtype != F32:
            _fail(i, ins, "scalar ops produce float32 scalars")
        if op is Op.SCONST:
            _expect(i, ins, 0, src)
            v = ins.attr("value")
            if not isinstance(v, float) or (v == v and f32(v) != v):
                _fail(i, ins, "value must be a float already rounded to float32")
            if is_attr(ins) and not str(ins.attr("attr")).isidentifier():
                _fail(i, ins, "attr must name an attribute (an identifier)")
        elif op in (Op.SINPUT, Op.SNUMEL):
            _expect(i, ins, 0, src)
            name = cast(str, ins.attr("name"))
            if name not in inputs:
                _fail(i, ins, f"no input named {name!r}")
            if op is Op.SINPUT and inputs[name].kind is not Kind.SCALAR:
                _fail(i, ins, f"input {name!r} is not a one-element scalar input")
            if op is Op.SNUMEL and inputs[name].kind is not Kind.TILE:
                _fail(i, ins, f"input {name!r} is not a streamed tile input")
        else:
            _expect(i, ins, 2 if op in SCALAR_BINARY else 1, src)
            if not all(_is_f32(s, Kind.SCALAR) for s in src):
                _fail(i, ins, "operands must be float32 scalars")
        return
    if op in (Op.COPY_IN, Op.COPY_IN_BRC, Op.COPY_IN_BCAST):
        _expect(i, ins, 0, src)
        name = cast(str, ins.attr("name"))
        if name not in inputs:
            _fail(i, ins, f"no input named {name!r}")
        want = Kind.SCALAR if op is Op.COPY_IN_BRC else Kind.TILE
        if inputs[name].kind is not want:
            _fail(i, ins, f"input {name!r} is a {inputs[name].kind.value} input")
        if inputs[name].broadcast != (op is Op.COPY_IN_BCAST):
            _fail(i, ins, f"input {name!r} is {'' if inputs[name].broadcast else 'not '}a broadcast input")
        if ins.kind is not Kind.TILE or ins.dtype != inputs[name].dtype:
            _fail(i, ins, "result must be a tile of the input's dtype")
        return
    if op is Op.COPY_OUT:
        _expect(i, ins, 1, src)
        name = cast(str, ins.attr("name"))
        if name not in outputs:
            _fail(i, ins, f"no output named {name!r}")
        if name in written:
            _fail(i, ins, f"output {name!r} written twice")
        written.add(name)
        if ins.kind is not None or ins.dtype is not None:
            _fail(i, ins, "CopyOut defines no value")
        if src[0].kind is not Kind.TILE or src[0].dtype != outputs[name].dtype:
            _fail(i, ins, f"source must be a tile of the output dtype {outputs[name].dtype}")
        return
    if op is Op.CAST:
        _expect(i, ins, 1, src)
        s = src[0]
        if s.kind is not Kind.TILE or ins.kind is not Kind.TILE:
            _fail(i, ins, "Cast maps a tile to a tile")
        if s.dtype == ins.dtype:
            _fail(
                i,
                ins,
                f"same-dtype Cast {s.dtype}->{ins.dtype} (rounds to an integer on the hardware)",
            )
        if (s.dtype, ins.dtype) not in {(F16, F32), (BF16, F32), (F32, F16), (F32, BF16)}:
            _fail(i, ins, f"unsupported Cast {s.dtype}->{ins.dtype}")
        round_mode = "CAST_NONE" if ins.dtype == F32 else "CAST_RINT"
        if ins.attr("round") != round_mode:
            _fail(i, ins, f"Cast {s.dtype}->{ins.dtype} must use {round_mode}")
        return
    if op is Op.COMPARE:
        _expect(i, ins, 2, src)
        if ins.kind is not Kind.MASK or ins.dtype != MASK_DTYPE:
            _fail(i, ins, "Compare produces a mask")
        if not _is_f32(src[0], Kind.TILE) or not (
            _is_f32(src[1], Kind.TILE) or _is_f32(src[1], Kind.SCALAR)
        ):
            _fail(i, ins, "Compare takes a float32 tile and a float32 tile or scalar")
        if ins.attr("mode") not in CMP_MODES:
            _fail(i, ins, f"mode must be one of {CMP_MODES}")
        return
    if not _is_f32(ins, Kind.TILE):
        _fail(i, ins, "compute ops produce float32 tiles")
    if op is Op.SELECT:
        _expect(i, ins, 3, src)
        mode = ins.attr("mode")
        want = Kind.SCALAR if mode == "TENSOR_SCALAR" else Kind.TILE
        if mode not in SELECT_MODES:
            _fail(i, ins, f"mode must be one of {SELECT_MODES}")
        if (
            src[0].kind is not Kind.MASK
            or not _is_f32(src[1], Kind.TILE)
            or not _is_f32(src[2], want)
        ):
            _fail(i, ins, f"Select {mode} takes a mask, a float32 tile and a float32 {want.value}")
        return
    if op is Op.DUPLICATE:
        _expect(i, ins, 1, src)
        if not _is_f32(src[0], Kind.SCALAR):
            _fail(i, ins, "Duplicate takes a float32 scalar")
        return
    if op in TILE_BINARY or op in TILE_UNARY:
        _expect(i, ins, 2 if op in TILE_BINARY else 1, src)
        if not all(_is_f32(s, Kind.TILE) for s in src):
            _fail(i, ins, "operands must be float32 tiles")
        return
    if op in TILE_SCALAR:
        _expect(i, ins, 2, src)
        if not (_is_f32(src[0], Kind.TILE) and _is_f32(src[1], Kind.SCALAR)):
            _fail(i, ins, "operands must be a float32 tile and a float32 scalar")
        return
    _fail(i, ins, "unhandled op")


# ------------------------------------------------------------------------------- scalar stages


def is_attr(ins: Instr) -> bool:
    """An SConst that stands for a node attribute (read at tiling time, never folded)."""
    return ins.op is Op.SCONST and any(key == "attr" for key, _ in ins.attrs)


def attr_scalars(k: Kernel) -> dict[str, float]:
    """Attribute name -> the value this kernel's node has, for every attribute SConst."""
    scalars = {}
    for ins in k.instrs:
        if is_attr(ins):
            value = ins.attr("value")
            assert isinstance(value, (int, float)), ins
            scalars[str(ins.attr("attr"))] = float(value)
    return scalars


def scalar_stages(k: Kernel) -> dict[int, str]:
    """Scalar value id -> "const" | "host" | "kernel" (see the module docstring)."""
    rank = {"const": 0, "host": 1, "kernel": 2}
    out: dict[int, str] = {}
    for i, ins in enumerate(k.instrs):
        if ins.kind is not Kind.SCALAR:
            continue
        if ins.op is Op.SCONST:
            out[i] = "host" if is_attr(ins) else "const"
        elif ins.op is Op.SNUMEL:
            out[i] = "host"
        elif ins.op is Op.SINPUT:
            out[i] = "kernel"
        else:
            out[i] = max((out[s] for s in ins.srcs), key=rank.__getitem__)
    return out


# ----------------------------------------------------------------------------------- text form


def format_float(v: float) -> str:
    """Shortest text that reads back to the same float32 (inf, -inf, nan spelled out)."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return (
        np.format_float_positional(np.float32(v), unique=True, trim="-")
        if (v == 0 or 1e-4 <= abs(v) < 1e16)
        else np.format_float_scientific(np.float32(v), unique=True, trim="-")
    )


def _ref(k: Kernel, v: int) -> str:
    return f"${v}" if k.instrs[v].kind is Kind.SCALAR else f"%{v}"


def _type(ins: Instr) -> str:
    if ins.kind is Kind.MASK:
        return "mask"
    assert ins.kind is not None, "only CopyOut has no kind, and it defines no value to type"
    return f"{ins.kind.value}<{ins.dtype}>"


def format_instr(k: Kernel, i: int) -> str:
    ins = k.instrs[i]
    operands = [_ref(k, s) for s in ins.srcs]
    attrs = []
    for key, val in ins.attrs:
        if key == "name":
            operands.insert(0, cast(str, val))
        elif key == "value":
            operands.insert(0, format_float(cast(float, val)))
        else:
            attrs.append(f"{key}={val}")
    body = " ".join([ins.op.value] + ([", ".join(operands)] if operands else []) + attrs)
    if ins.kind is None:
        return body
    return f"{_ref(k, i)} = {body} : {_type(ins)}"


def format_kernel(k: Kernel) -> str:
    """The text form: a header, one line per parameter, one line per instruction.

    Grammar (one item a line, two-space indent below the header):
        kernel <op_type> <dtype>
        variant <axis>=<value> ...            (when the kernel has a variant)
        input <name>: <dtype> tile|scalar [broadcast]
        output <name>: <dtype>
        <ref> = <Op> [<operand>, ...] [key=value ...] : tile<dtype> | mask | scalar<float32>
        CopyOut <output>, <ref>
    <ref> is %<id> for tiles and masks and $<id> for scalars; names and SConst values are
    written as the first operand.
    """
    lines = [f"kernel {k.op_type} {k.dtype}"]
    if k.variant:
        lines.append("  variant " + " ".join(f"{a}={v}" for a, v in k.variant))
    lines += [f"  input {p.name}: {p.dtype} {p.kind.value}" + (" broadcast" if p.broadcast else "")
              for p in k.inputs]
    lines += [f"  output {p.name}: {p.dtype}" for p in k.outputs]
    lines += [f"  {format_instr(k, i)}" for i in range(len(k.instrs))]
    return "\n".join(lines) + "\n"


_LINE = re.compile(
    r"^(?:(?P<ref>[%$]\d+) = )?(?P<op>[A-Za-z]+)(?: (?P<rest>.*?))?(?: : (?P<type>\S+))?$"
)
_TYPE = re.compile(r"^(?:(?P<kind>tile|scalar)<(?P<dtype>\w+)>|mask)$")


def _parse_operands(rest: str) -> tuple[list[str], dict[str, str]]:
    operands: list[str] = []
    attrs: dict[str, str] = {}
    for tok in [t for t in re.split(r"[ ,]+", rest.strip()) if t]:
        key, eq, val = tok.partition("=")
        if eq:
            attrs[key] = val
        else:
            operands.append(tok)
    return operands, attrs


def parse_kernel(text: str) -> Kernel:
    """Read the text form back (inverse of format_kernel); raises IRError on bad text."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    head = lines[0].split() if lines else []
    if len(head) != 3 or head[0] != "kernel":
        raise IRError("text must start with 'kernel <op_type> <dtype>'")
    b = KernelBuilder(head[1], head[2])
    for n, ln in enumerate(lines[1:], start=2):
        word, _, tail = ln.partition(" ")
        if word == "variant" and n == 2:
            pairs = [tok.partition("=") for tok in tail.split()]
            if not pairs or any(not eq or not a or not v for a, eq, v in pairs):
                raise IRError(f"line {n}: bad variant line {ln!r}")
            b.variant = tuple((a, v) for a, _, v in pairs)
            continue
        if word in ("input", "output"):
            name, _, spec = tail.partition(": ")
            parts = spec.split()
            if word == "input" and len(parts) in (2, 3) and parts[2:] in ([], ["broadcast"]):
                b.input(name, parts[0], Kind(parts[1]), len(parts) == 3)
            elif word == "output" and len(parts) == 1:
                b.output(name, parts[0])
            else:
                raise IRError(f"line {n}: bad parameter line {ln!r}")
            continue
        b.emit(_parse_instr(n, ln, len(b.instrs)))
    return b.build()


def _parse_instr(n: int, ln: str, index: int) -> Instr:
    m = _LINE.match(ln)
    if not m:
        raise IRError(f"line {n}: cannot parse {ln!r}")
    try:
        op = Op(m["op"])
    except ValueError:
        raise IRError(f"line {n}: unknown op {m['op']!r}") from None
    if m["ref"] is not None and int(m["ref"][1:]) != index:
        raise IRError(f"line {n}: value {m['ref']} out of order (expected id {index})")
    operands, attrs = _parse_operands(m["rest"] or "")
    kw: dict[str, object] = dict(attrs)
    if op in (Op.COPY_IN, Op.COPY_IN_BRC, Op.COPY_IN_BCAST, Op.COPY_OUT, Op.SINPUT, Op.SNUMEL) and operands:
        kw["name"] = operands.pop(0)
    elif op is Op.SCONST and operands:
        kw["value"] = f32(float(operands.pop(0)))
    try:
        srcs = tuple(int(t[1:]) for t in operands)
    except ValueError:
        raise IRError(f"line {n}: bad operand in {ln!r}") from None
    if m["type"] is None:
        return Instr(op, None, None, srcs, make_attrs(**kw))
    t = _TYPE.match(m["type"])
    if not t:
        raise IRError(f"line {n}: bad type {m['type']!r}")
    if t["kind"] is None:
        return Instr(op, MASK_DTYPE, Kind.MASK, srcs, make_attrs(**kw))
    return Instr(op, t["dtype"], Kind(t["kind"]), srcs, make_attrs(**kw))
