"""Rewrites that depend on the target, applied after the generic passes (codegen/passes.py).

expand_sign: on targets whose AscendC Sign is the high-level API over a shared temp buffer
(__NPU_ARCH__ 2201: ascend910b, ascend910_93), Sign with the 768-byte minimum temp runs in
64-element chunks, each of 3 Duplicate, 2 Compare, 2 Select, 1 Add and 6 PIPE_V barriers
(impl/adv_api/detail/math/sign/sign_common_impl.h). The same result over the whole tile is

    pos = Select(Compare(x, 0, GT), Duplicate(1), 0)        1 where x > 0, else +0
    neg = Select(Compare(x, 0, LT), Duplicate(-1), 0)       -1 where x < 0, else +0
    sign = Add(pos, neg)

seven full-tile instructions, bit for bit the IR's Sign: NaN compares false on both sides and
gives +0 + +0 = +0, as do +-0. On 950 (3510) Sign is kept: its temp is ignored and it is one
instruction.
"""

from __future__ import annotations

from codegen.ir import Instr, Kernel, KernelBuilder, Op
from codegen.passes import optimize
from codegen.targets import Target


def expand_sign(k: Kernel) -> Kernel:
    """The kernel with every Sign replaced by the Compare/Select/Add sequence above."""
    if not any(ins.op is Op.SIGN for ins in k.instrs):
        return k
    b = KernelBuilder(k.op_type, k.dtype, k.variant)
    b.inputs, b.outputs = list(k.inputs), list(k.outputs)
    remap: dict[int, int] = {}
    for i, ins in enumerate(k.instrs):
        srcs = tuple(remap[s] for s in ins.srcs)
        if ins.op is Op.SIGN:
            (x,) = srcs
            zero = b.sconst(0.0)
            pos = b.select(b.compare(x, zero, "GT"), b.duplicate(b.sconst(1.0)), zero)
            neg = b.select(b.compare(x, zero, "LT"), b.duplicate(b.sconst(-1.0)), zero)
            remap[i] = b.binary(Op.ADD, pos, neg)
        else:
            remap[i] = b.emit(Instr(ins.op, ins.dtype, ins.kind, srcs, ins.attrs))
    return optimize(b.build())


def for_target(k: Kernel, target: Target) -> Kernel:
    """The kernel as codegen emits it for `target` (same results, bit for bit)."""
    return k if target.native_sign else expand_sign(k)

