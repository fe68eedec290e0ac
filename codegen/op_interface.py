"""The interface of the emitted operators: op names, inputs, outputs, attributes and dtypes.

Each operator's interface is part of its op type's lowering rule (codegen/registry.py). The
emitted OpDef declares it; the tiling function reads the attributes in this order; the aclnn
example passes them. An operator with CANN's name has CANN's ops-nn prototype exactly (a custom
package that registered CANN's name with another prototype would shadow CANN's operator on the
machine); what the fused nodes add (`scale`, `scalar_form`, `shrink_max`, bfloat16 or float32
scalars for ApplyProximalGradientDescent) goes to an operator of the project's own name.
"""

from __future__ import annotations

from codegen.ir import Kernel, attr_scalars
from codegen.registry import Attribute, OpInterface, contract_of, operator_named
from codegen.rules import axes_of, interface_of
from contracts.fused_ops import OP_SPECS, OpSpec

__all__ = ["Attribute", "OpInterface", "call_attributes", "contract", "interface", "is_cann"]


def interface(operator: str) -> OpInterface:
    return interface_of(operator)


def contract(operator: str) -> OpSpec:
    """The contract (contracts/fused_ops.py) of the fused op whose nodes an operator runs."""
    return OP_SPECS[contract_of(operator)]


def is_cann(operator: str) -> bool:
    """Whether the operator is CANN's own (its prototype exactly), not the project's."""
    return operator_named(operator).cann


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
