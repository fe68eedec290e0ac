"""Variant axes: how the kernels of one fused op type differ beyond their dtype.

One emitted operator holds every variant the model needs; its tiling function recomputes each
axis from the call (attributes, input dtypes and shapes) and sets the tiling key of the variant,
and the kernel entry branches on that key. Everything else a node carries (sigma, scale,
shrink_max, the scalar inputs' values) is read at tiling time or run time, so nodes that differ
only there share one kernel.

A rule (codegen/rules/) declares its axes and names its kernel's axis values; the emitter
(codegen/emit/) writes the C++ that recomputes each axis from its source (codegen/registry.py).

Tiling key = dtype code | (buffer_num - 1) << 8 | variant code << 9, where dtype code is the
ops-nn encoding (DT_FLOAT 0, DT_FLOAT16 1, DT_BF16 27) and the variant code numbers the axis
values in mixed radix, first axis least significant.
"""

from __future__ import annotations

from codegen.ir import FLOAT_DTYPES
from codegen.registry import Axis
from codegen.rules import axes_of
from contracts.errors import InternalError

__all__ = ["FLOAT_DTYPES", "Axis", "axes_of", "check_variant", "variant_code"]


def check_variant(op_type: str, variant: tuple[tuple[str, str], ...]) -> None:
    axes = axes_of(op_type)
    if tuple(a for a, _ in variant) != tuple(a.name for a in axes):
        raise InternalError(
            f"{op_type} variant names axes {[a for a, _ in variant]}, "
            f"expected {[a.name for a in axes]}"
        )
    for (name, value), axis in zip(variant, axes):
        if value not in axis.values:
            raise InternalError(f"{op_type} axis {name}: {value!r} is not one of {axis.values}")


def variant_code(op_type: str, variant: tuple[tuple[str, str], ...]) -> int:
    """The variant's number: axis values in mixed radix, first axis least significant."""
    check_variant(op_type, variant)
    code, weight = 0, 1
    for (_, value), axis in zip(variant, axes_of(op_type)):
        code += axis.values.index(value) * weight
        weight *= len(axis.values)
    return code
