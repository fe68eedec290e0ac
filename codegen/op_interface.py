"""The interface of the emitted operators: CANN's op names, inputs, outputs and attributes.

Each op type's interface is part of its lowering rule (codegen/registry.py). The emitted OpDef
declares it; the tiling function reads the attributes in this order; the aclnn example passes
them. Attributes CANN's operator lacks (the fused node's `scale`, `scalar_form`, `shrink_max`)
are optional with defaults that give CANN's semantics, so a caller of CANN's interface gets
CANN's result.
"""

from __future__ import annotations

from codegen.ir import Kernel, attr_scalars
from codegen.registry import Attribute, OpInterface
from codegen.rules import axes_of, interface_of

__all__ = ["Attribute", "OpInterface", "call_attributes", "interface"]


def interface(op_type: str) -> OpInterface:
    return interface_of(op_type)


def call_attributes(k: Kernel) -> dict[str, float | str | bool]:
    """The attribute values of a call this kernel serves: the node's values where the kernel
    reads them, the values its variant fixes, the defaults for the rest."""
    values: dict[str, float | str | bool] = {a.name: a.default for a in interface(k.op_type).attributes}
    axes = {a.name: a for a in axes_of(k.op_type)}
    for name, value in k.variant:
        axis = axes[name]
        fixed = axis.attribute_value(value)
        if fixed is not None:
            values[axis.reads] = fixed
    values.update(attr_scalars(k))
    return values
