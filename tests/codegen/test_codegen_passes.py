"""Generic passes (folding, simplification, CSE, DCE) and buffer liveness/reuse."""

from __future__ import annotations

import math

import pytest

from codegen.buffers import Position, allocate
from codegen.ir import F16, F32, IRError, Kernel, KernelBuilder, Kind, Op, format_kernel
from codegen.passes import eliminate_dead_code, optimize
from codegen.scalar_eval import eval_scalar


def _unary_kernel(dtype: str = F32) -> tuple[KernelBuilder, int]:
    b = KernelBuilder("T", dtype)
    b.input("a", dtype)
    b.input("s", dtype, Kind.SCALAR)
    b.output("y", dtype)
    x = b.copy_in("a")
    return b, (x if dtype == F32 else b.cast(x, F32))


def _finish(b: KernelBuilder, v: int, dtype: str = F32) -> Kernel:
    b.copy_out("y", v if dtype == F32 else b.cast(v, dtype))
    return b.build()


def _tile_ops(k: Kernel) -> list[str]:
    return [ins.op.value for ins in k.instrs if ins.kind is not Kind.SCALAR]


def test_scalar_folding_is_exact_float32() -> None:
    b, x = _unary_kernel()
    c = b.sop(Op.SRECIP, b.sop(Op.SADD, b.sconst(1.0), b.sop(Op.SMUL, b.sconst(0.1), b.sconst(0.3))))
    k = optimize(_finish(b, b.tile_scalar(Op.MULS, x, c)))
    consts = [ins.attr("value") for ins in k.instrs if ins.op is Op.SCONST]
    want = eval_scalar(Op.SRECIP, eval_scalar(Op.SADD, 1.0, eval_scalar(Op.SMUL, 0.1, 0.3)))
    assert consts == [want]
    assert not any(ins.op in (Op.SADD, Op.SMUL, Op.SRECIP) for ins in k.instrs)


def test_scalar_min_max_propagate_nan_by_definition() -> None:
    nan = float("nan")
    for op in (Op.SMAX, Op.SMIN):
        assert math.isnan(eval_scalar(op, nan, 1.0)) and math.isnan(eval_scalar(op, 1.0, nan))
    assert eval_scalar(Op.SMAX, -1.0, 2.0) == 2.0 and eval_scalar(Op.SMIN, -1.0, 2.0) == -1.0
    assert eval_scalar(Op.SRECIP, 0.0) == math.inf
    assert eval_scalar(Op.SMUL, 3.0e38, 10.0) == math.inf


def test_runtime_scalars_are_not_folded_and_times_one_is_dropped() -> None:
    b, x = _unary_kernel()
    s = b.sop(Op.SMUL, b.sconst(1.0), b.sinput("s"))
    k = optimize(_finish(b, b.tile_scalar(Op.MULS, x, s)))
    assert [ins.op for ins in k.instrs if ins.kind is Kind.SCALAR] == [Op.SINPUT]


@pytest.mark.parametrize(
    "build, expect",
    [
        (lambda b, x: b.tile_scalar(Op.MULS, x, b.sconst(1.0)), ["CopyIn", "CopyOut"]),
        (lambda b, x: b.tile_scalar(Op.ADDS, x, b.sconst(-0.0)), ["CopyIn", "CopyOut"]),
        (lambda b, x: b.binary(Op.MUL, b.duplicate(b.sinput("s")), x), ["CopyIn", "Muls", "CopyOut"]),
        (lambda b, x: b.binary(Op.ADD, x, b.duplicate(b.sinput("s"))), ["CopyIn", "Adds", "CopyOut"]),
        (lambda b, x: b.binary(Op.SUB, x, b.duplicate(b.sconst(0.0))), ["CopyIn", "CopyOut"]),
        (lambda b, x: b.binary(Op.SUB, x, b.duplicate(b.sconst(2.0))), ["CopyIn", "Adds", "CopyOut"]),
        (
            lambda b, x: b.tile_scalar(Op.MINS, b.tile_scalar(Op.MAXS, x, b.sconst(1.0)), b.sconst(0.5)),
            ["Duplicate", "CopyOut"],
        ),
        (
            lambda b, x: b.tile_scalar(Op.MINS, b.unary(Op.ABS, x), b.sconst(-2.0)),
            ["Duplicate", "CopyOut"],
        ),
        (
            lambda b, x: b.select(b.compare(x, b.sconst(0.0), "GT"), x, x),
            ["CopyIn", "CopyOut"],
        ),
    ],
)
def test_algebraic_rules(build, expect: list[str]) -> None:
    b, x = _unary_kernel()
    k = optimize(_finish(b, build(b, x)))
    ops = _tile_ops(k)
    if ops[0] == "Duplicate":
        # the kernel no longer reads its input at all: a constant clamp
        assert "CopyIn" not in ops
    assert ops == expect


def test_subtracting_zero_keeps_negative_zero() -> None:
    b, x = _unary_kernel()
    k = optimize(_finish(b, b.binary(Op.SUB, x, b.duplicate(b.sconst(2.0)))))
    adds = next(ins for ins in k.instrs if ins.op is Op.ADDS)
    assert k.instrs[adds.srcs[1]].attr("value") == -2.0
    b, x = _unary_kernel()
    kept = optimize(_finish(b, b.tile_scalar(Op.ADDS, x, b.sconst(0.0))))
    assert "Adds" in _tile_ops(kept)  # x + (+0) turns -0 into +0: not an identity


def test_compare_abs_ge_zero_becomes_not_nan_test() -> None:
    b, x = _unary_kernel()
    m = b.compare(b.unary(Op.ABS, x), b.sconst(0.0), "GE")
    k = optimize(_finish(b, b.select(m, b.unary(Op.SIGN, x), x)))
    cmp = next(ins for ins in k.instrs if ins.op is Op.COMPARE)
    assert cmp.attr("mode") == "EQ" and cmp.srcs[0] == cmp.srcs[1]
    assert "Abs" not in _tile_ops(k)


def test_cse_and_dce() -> None:
    b, x = _unary_kernel()
    a1 = b.unary(Op.ABS, x)
    a2 = b.unary(Op.ABS, x)
    b.unary(Op.SIGN, x)  # dead
    k = optimize(_finish(b, b.binary(Op.ADD, a1, a2)))
    assert _tile_ops(k) == ["CopyIn", "Abs", "Add", "CopyOut"]
    add = next(ins for ins in k.instrs if ins.op is Op.ADD)
    assert add.srcs[0] == add.srcs[1]


def test_dce_hoists_scalars_and_keeps_ssa() -> None:
    b, x = _unary_kernel()
    y = b.tile_scalar(Op.MULS, x, b.sinput("s"))
    k = eliminate_dead_code(_finish(b, y))
    assert k.instrs[0].kind is Kind.SCALAR
    assert format_kernel(optimize(k)) == format_kernel(optimize(optimize(k)))


def test_optimize_terminates_with_nan_constants() -> None:
    b, x = _unary_kernel()
    k = optimize(_finish(b, b.tile_scalar(Op.MULS, x, b.sconst(float("nan")))))
    assert "nan" in format_kernel(k)


# --------------------------------------------------------------------------- buffers


def test_inplace_reuse_and_no_scratch_for_fp32_chain() -> None:
    b = KernelBuilder("T", F32)
    b.input("a", F32)
    b.input("c", F32)
    b.output("y", F32)
    x = b.binary(Op.SUB, b.copy_in("a"), b.copy_in("c"))
    y = b.tile_scalar(Op.MULS, b.unary(Op.ABS, x), b.sconst(3.0))
    k = _finish(b, y)
    alloc = allocate(k)
    assert [s.position for s in alloc.slots] == [Position.VECIN, Position.VECIN, Position.VECOUT]
    assert alloc.bytes_per_element(1) == 12 and alloc.bytes_per_element(2) == 24
    assert alloc.slot_of(y).position is Position.VECOUT


def test_sign_is_never_in_place_and_masks_get_mask_slots() -> None:
    b, x = _unary_kernel(F16)
    s = b.unary(Op.SIGN, x)
    m = b.compare(x, x, "EQ")
    k = _finish(b, b.select(m, s, x), F16)
    alloc = allocate(k)
    assert alloc.slot_of(s) != alloc.slot_of(x)
    assert alloc.slot_of(m).dtype == "uint8" and alloc.slot_of(m).position is Position.VECCALC
    assert alloc.slot_of(m).bytes_for(256) == 32


def test_output_slot_is_only_borrowed_by_values_dead_before_the_store() -> None:
    # t = |x| lives until the end; the output queue must not hold it
    b, x = _unary_kernel()
    t = b.unary(Op.ABS, x)
    u = b.unary(Op.SIGN, t)
    k = _finish(b, b.binary(Op.MUL, u, t))
    alloc = allocate(k)
    out = alloc.slot_of(len(k.instrs) - 2)
    assert out.position is Position.VECOUT
    assert alloc.slot_of(t) is not out
    assert alloc.slot_of(u) is not alloc.slot_of(t)


def test_every_value_has_a_slot_of_its_dtype_and_no_live_overlap() -> None:
    from codegen.api import kernel_for_spec
    from codegen.nodes import InputSpec, NodeSpec

    specs = [
        NodeSpec("n", "SmoothL1LossGradV2", {r: InputSpec(dt, (64,)) for r in ("predict", "label", "dout")},
                 {"sigma": 0.5, "reduction": "mean", "scale": 1.0})
        for dt in ("float32", "float16", "bfloat16")
    ] + [
        NodeSpec("n", "ApplyProximalGradientDescent",
                 {"var": InputSpec(dt, (64,)), "delta": InputSpec(dt, (64,)),
                  "alpha": InputSpec(dt, ()), "l1": InputSpec(dt, ()), "l2": InputSpec(dt, ())},
                 {"scalar_form": "raw"})
        for dt in ("float32", "float16", "bfloat16")
    ]
    for spec in specs:
        k = kernel_for_spec(spec)
        alloc = allocate(k)
        last = {}
        for i, ins in enumerate(k.instrs):
            for s in ins.srcs:
                last[s] = i
        tiles = [i for i, ins in enumerate(k.instrs) if ins.kind in (Kind.TILE, Kind.MASK)]
        for v in tiles:
            assert alloc.slot_of(v).dtype == k.instrs[v].dtype
        # two values sharing a slot never live at once (a use at the other's definition is
        # allowed only when that instruction runs in place and reads it)
        for v in tiles:
            for w in tiles:
                if v < w and alloc.value_slot[v] == alloc.value_slot[w]:
                    assert last[v] <= w, (spec.attrs, v, w)
                    if last[v] == w:
                        assert v in k.instrs[w].srcs and k.instrs[w].op is not Op.SIGN


def test_copy_out_of_a_loaded_tile_is_rejected() -> None:
    b = KernelBuilder("T", F32)
    b.input("a", F32)
    b.output("y", F32)
    b.copy_out("y", b.copy_in("a"))
    with pytest.raises(IRError, match="compute step"):
        allocate(b.build())
