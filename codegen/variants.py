"""Variant axes: how the kernels of one fused op type differ beyond their dtype.

One emitted operator holds every variant the model needs; its tiling function recomputes each
axis from the call (attributes, input dtypes and shapes) and sets the tiling key of the variant,
and the kernel entry branches on that key. Everything else a node carries (sigma, scale,
shrink_max, the scalar inputs' values) is read at tiling time or run time, so nodes that differ
only there share one kernel.

A rule (codegen/rules/) names its kernel's axis values; the emitter (codegen/emit/) writes the
C++ that recomputes them. Both read this table.

Tiling key = dtype code | (buffer_num - 1) << 8 | variant code << 9, where dtype code is the
ops-nn encoding (DT_FLOAT 0, DT_FLOAT16 1, DT_BF16 27) and the variant code numbers the axis
values in mixed radix, first axis least significant.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.errors import CodegenError
from lowering.fused_ops import PROXIMAL_GD, REDUCTIONS, SCALAR_FORMS, SMOOTH_L1_GRAD

FLOAT_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]


AXES: dict[str, tuple[Axis, ...]] = {
    SMOOTH_L1_GRAD: (
        Axis("dout", ("tile", "scalar")),  # dout has predict's shape, or one element
        Axis("reduction", REDUCTIONS),
        Axis("sigma", ("positive", "zero")),
        Axis("scale", ("one", "other")),  # scale 1 (CANN's op) needs no multiply
    ),
    PROXIMAL_GD: (
        Axis("scalar_form", SCALAR_FORMS),
        Axis("shrink_max", ("inf", "finite")),
        Axis("alpha_dtype", FLOAT_DTYPES),
        Axis("l1_dtype", FLOAT_DTYPES),
        Axis("l2_dtype", FLOAT_DTYPES),
    ),
}


def check_variant(op_type: str, variant: tuple[tuple[str, str], ...]) -> None:
    axes = AXES.get(op_type)
    if axes is None:
        raise CodegenError(f"no variant axes for {op_type!r}")
    if tuple(a for a, _ in variant) != tuple(a.name for a in axes):
        raise CodegenError(
            f"{op_type} variant names axes {[a for a, _ in variant]}, "
            f"expected {[a.name for a in axes]}"
        )
    for (name, value), axis in zip(variant, axes):
        if value not in axis.values:
            raise CodegenError(f"{op_type} axis {name}: {value!r} is not one of {axis.values}")


def variant_code(op_type: str, variant: tuple[tuple[str, str], ...]) -> int:
    """The variant's number: axis values in mixed radix, first axis least significant."""
    check_variant(op_type, variant)
    code, weight = 0, 1
    for (_, value), axis in zip(variant, AXES[op_type]):
        code += axis.values.index(value) * weight
        weight *= len(axis.values)
    return code
