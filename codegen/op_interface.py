"""The interface of the emitted operators: CANN's op names, inputs, outputs and attributes.

The emitted OpDef declares these; the tiling function reads the attributes in this order; the
aclnn example passes them. Attributes CANN's operator lacks (the fused node's `scale`,
`scalar_form`, `shrink_max`) are optional with defaults that give CANN's semantics, so a
caller of CANN's interface gets CANN's result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from codegen.ir import Kernel, attr_scalars
from lowering.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD


@dataclass(frozen=True)
class Attribute:
    name: str
    kind: str  # "float" | "string" | "bool"
    default: float | str | bool
    cann: bool  # CANN's operator has it too
    doc: str


@dataclass(frozen=True)
class OpInterface:
    op_type: str
    outputs: tuple[str, ...]  # OpDef output names, in the kernel's output order
    attributes: tuple[Attribute, ...]
    ref_output: str | None  # an output that is also the input of this name (updated in place)


INTERFACES: dict[str, OpInterface] = {
    SMOOTH_L1_GRAD: OpInterface(
        SMOOTH_L1_GRAD,
        outputs=("gradient",),
        attributes=(
            Attribute("sigma", "float", 1.0, True, "PyTorch's beta, >= 0"),
            Attribute("reduction", "string", "mean", True, '"none", "mean" or "sum"'),
            Attribute("scale", "float", 1.0, False, "constant factor on the gradient (1: CANN's op)"),
        ),
        ref_output=None,
    ),
    PROXIMAL_GD: OpInterface(
        PROXIMAL_GD,
        outputs=("var",),
        attributes=(
            Attribute("use_locking", "bool", False, True, "accepted and ignored, as by CANN's AI Core kernel"),
            Attribute(
                "scalar_form", "string", "raw", False,
                '"raw" (CANN: threshold alpha*l1, divisor 1+alpha*l2), "folded" (l1, l2) or '
                '"folded_reciprocal" (l1, 1/l2)',
            ),
            Attribute(
                "shrink_max", "float", math.inf, False,
                "clamp of the shrunk magnitude (inf: CANN's op; finite: ONNX Clip without max)",
            ),
        ),
        ref_output="var",
    ),
}

# Attribute values a variant axis fixes (codegen/variants.py): axis -> value -> (attribute, value)
_AXIS_ATTRS: dict[str, dict[str, tuple[str, float | str]]] = {
    "reduction": {r: ("reduction", r) for r in ("none", "mean", "sum")},
    "sigma": {"zero": ("sigma", 0.0)},
    "scale": {"one": ("scale", 1.0)},
    "scalar_form": {f: ("scalar_form", f) for f in ("raw", "folded", "folded_reciprocal")},
    "shrink_max": {"inf": ("shrink_max", math.inf)},
}


def interface(op_type: str) -> OpInterface:
    return INTERFACES[op_type]


def call_attributes(k: Kernel) -> dict[str, float | str | bool]:
    """The attribute values of a call this kernel serves: the node's values where the kernel
    reads them, the values its variant fixes, the defaults for the rest."""
    values: dict[str, float | str | bool] = {a.name: a.default for a in interface(k.op_type).attributes}
    for axis, value in k.variant:
        fixed = _AXIS_ATTRS.get(axis, {}).get(value)
        if fixed is not None:
            values[fixed[0]] = fixed[1]
    values.update(attr_scalars(k))
    return values
