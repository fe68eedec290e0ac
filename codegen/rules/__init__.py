"""Lowering rules: one function per fused op type, NodeSpec -> unoptimised kernel IR.

A new pattern family adds a module here, one entry in RULES and VARIANTS, and its axes in
codegen/variants.py. Rules state the computation
plainly (with constants as SConst); the generic passes in codegen/passes.py fold and simplify.
"""

from __future__ import annotations

from collections.abc import Callable

from codegen.errors import CodegenError
from codegen.ir import Kernel
from codegen.nodes import NodeSpec
from codegen.rules.proximal import lower_proximal_gd, proximal_variant
from codegen.rules.smooth_l1 import lower_smooth_l1_grad, smooth_l1_variant
from lowering.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

RULES: dict[str, Callable[[NodeSpec], Kernel]] = {
    SMOOTH_L1_GRAD: lower_smooth_l1_grad,
    PROXIMAL_GD: lower_proximal_gd,
}


VARIANTS: dict[str, Callable[[NodeSpec], tuple[tuple[str, str], ...]]] = {
    SMOOTH_L1_GRAD: smooth_l1_variant,
    PROXIMAL_GD: proximal_variant,
}


def node_variant(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    """The variant axes (codegen/variants.py) of the kernel a node lowers to; checks the node's
    attributes and dtypes as lowering would, without lowering it."""
    try:
        variant = VARIANTS[spec.op_type]
    except KeyError:
        raise CodegenError(f"no lowering rule for {spec.op_type!r}") from None
    return variant(spec)


def lower_node(spec: NodeSpec) -> Kernel:
    try:
        rule = RULES[spec.op_type]
    except KeyError:
        raise CodegenError(f"no lowering rule for {spec.op_type!r}") from None
    return rule(spec)
