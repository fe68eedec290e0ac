"""Kernel IR: verifier rules, text form (deterministic, parseable), scalar stages, targets."""

from __future__ import annotations

import math

import pytest

from codegen.ir import (
    F16,
    F32,
    Instr,
    IRError,
    Kernel,
    KernelBuilder,
    Kind,
    Op,
    f32,
    format_float,
    format_kernel,
    make_attrs,
    parse_kernel,
    scalar_stages,
    verify,
)
from codegen.targets import TARGETS, UnknownTargetError, get_target


def _smooth_like(dtype: str = F16) -> KernelBuilder:
    b = KernelBuilder("SmoothL1LossGradV2", dtype)
    b.input("predict", dtype)
    b.input("label", dtype)
    b.input("dout", dtype, Kind.SCALAR)
    b.output("gradient", dtype)
    return b


def _full_kernel() -> Kernel:
    b = _smooth_like()
    k = b.sop(Op.SMUL, b.sinput("dout"), b.sop(Op.SRECIP, b.snumel("predict")))
    sigma, inv = b.sconst(0.5), b.sconst(2.0)
    x = b.binary(Op.SUB, b.cast(b.copy_in("predict"), F32), b.cast(b.copy_in("label"), F32))
    m = b.compare(b.unary(Op.ABS, x), sigma, "GE")
    s = b.select(m, b.unary(Op.SIGN, x), b.tile_scalar(Op.MULS, x, inv))
    b.copy_out("gradient", b.cast(b.tile_scalar(Op.MULS, s, k), F16))
    return b.build()


def test_text_round_trips_and_is_deterministic() -> None:
    k = _full_kernel()
    text = format_kernel(k)
    assert parse_kernel(text) == k
    assert format_kernel(parse_kernel(text)) == text
    assert text.splitlines()[0] == "kernel SmoothL1LossGradV2 float16"
    assert "  %12 = Compare %11, $4 mode=GE : mask" in text.splitlines()
    assert text.endswith("  CopyOut gradient, %17\n")


def test_docstring_example_is_the_real_text_form() -> None:
    import codegen.ir as ir_module

    text = format_kernel(_full_kernel())
    doc_lines = [ln.strip() for ln in ir_module.__doc__.splitlines()]
    for line in text.splitlines():
        assert line.strip() in doc_lines


def test_float_text_reads_back_exactly() -> None:
    for v in (0.1, -0.0, 1e-30, 3.4028234663852886e38, 1e-45, float("inf"), float("-inf")):
        assert f32(float(format_float(f32(v)))) == f32(v)
        if v == 0:
            assert math.copysign(1, float(format_float(v))) == -1
    assert format_float(float("nan")) == "nan"


def test_float32_to_float32_cast_is_rejected() -> None:
    b = KernelBuilder("X", F32)
    b.input("a", F32)
    b.output("y", F32)
    v = b.copy_in("a")
    with pytest.raises(IRError, match="same-dtype Cast"):
        b.copy_out("y", b.cast(v, F32))
        b.build()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda ins: ins[:-1] + (Instr(Op.COPY_OUT, None, None, (99,), make_attrs(name="y")),), "SSA"),
        (lambda ins: ins + (Instr(Op.COPY_OUT, None, None, (2,), make_attrs(name="y")),), "twice"),
        (lambda ins: (ins[0], Instr(Op.ABS, F32, Kind.TILE, (0,))) + ins[2:], "float32 tiles"),
        (lambda ins: ins[:2] + (Instr(Op.MULS, F32, Kind.TILE, (1, 1)),) + ins[3:], "scalar"),
        (lambda ins: ins[:-1], "never written"),
    ],
)
def test_verifier_rejects(mutate, message: str) -> None:
    b = KernelBuilder("X", F16)
    b.input("a", F16)
    b.output("y", F16)
    x = b.cast(b.copy_in("a"), F32)
    b.copy_out("y", b.cast(b.unary(Op.ABS, x), F16))
    k = b.build()
    bad = Kernel(k.op_type, k.dtype, k.inputs, k.outputs, mutate(k.instrs))
    with pytest.raises(IRError, match=message):
        verify(bad)


def test_verifier_checks_kinds_of_parameters_and_operands() -> None:
    b = _smooth_like()
    with pytest.raises(IRError, match="not a one-element scalar input"):
        b.sinput("predict")
        b.build()
    b = _smooth_like()
    with pytest.raises(IRError, match="scalar input"):
        b.copy_in("dout")
        b.build()
    b = _smooth_like()
    x = b.cast(b.copy_in("predict"), F32)
    b.emit(Instr(Op.SELECT, F32, Kind.TILE, (x, x, x), make_attrs(mode="TENSOR_TENSOR")))
    with pytest.raises(IRError, match="mask"):
        b.build()


def test_parameter_names_must_be_identifiers() -> None:
    b = KernelBuilder("X", F32)
    b.input('a"; system("x")', F32)
    b.output("y", F32)
    with pytest.raises(IRError, match="identifier"):
        b.build()


def test_parse_rejects_garbage() -> None:
    with pytest.raises(IRError):
        parse_kernel("kernel X float32\n  %0 = Frobnicate : tile<float32>\n")
    with pytest.raises(IRError):
        parse_kernel("not a kernel")


def test_scalar_stages() -> None:
    k = _full_kernel()
    stages = scalar_stages(k)
    by_op = {k.instrs[i].op: st for i, st in stages.items()}
    assert by_op[Op.SINPUT] == "kernel"
    assert by_op[Op.SNUMEL] == "host"
    assert by_op[Op.SRECIP] == "host"
    assert by_op[Op.SMUL] == "kernel"
    assert by_op[Op.SCONST] == "const"
    assert k.vector_instruction_count() == 10


def test_targets_table_and_unknown_target() -> None:
    assert set(TARGETS) == {"ascend950", "ascend910b", "ascend910_93"}
    assert get_target("ascend950").ub_bytes == 253952 and get_target("ascend950").aiv_cores == 64
    assert get_target("ascend910b").npu_arch == 2201 and get_target("ascend910b").ub_bytes == 196352
    with pytest.raises(UnknownTargetError) as err:
        get_target("ascend310p")
    assert isinstance(err.value, ValueError)
    for name in TARGETS:
        assert name in str(err.value)
