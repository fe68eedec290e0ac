"""Lowering rules: one function per fused op type, NodeSpec -> unoptimised kernel IR.

A new pattern family adds a module here and one entry in RULES. Rules state the computation
plainly (with constants as SConst); the generic passes in codegen/passes.py fold and simplify.
"""

from __future__ import annotations

from collections.abc import Callable

from codegen.errors import CodegenError
from codegen.ir import Kernel
from codegen.nodes import NodeSpec
from codegen.rules.proximal import lower_proximal_gd
from codegen.rules.smooth_l1 import lower_smooth_l1_grad
from lowering.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

RULES: dict[str, Callable[[NodeSpec], Kernel]] = {
    SMOOTH_L1_GRAD: lower_smooth_l1_grad,
    PROXIMAL_GD: lower_proximal_gd,
}


def lower_node(spec: NodeSpec) -> Kernel:
    try:
        rule = RULES[spec.op_type]
    except KeyError:
        raise CodegenError(f"no lowering rule for {spec.op_type!r}") from None
    return rule(spec)
