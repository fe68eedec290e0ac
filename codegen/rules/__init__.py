"""Lowering rules: one module per fused op type, each registering its entry (codegen/registry.py):
NodeSpec -> unoptimised kernel IR, the node's variant, the variant axes and the operator interface.

Rules state the computation plainly (with constants as SConst); the generic passes in
codegen/passes.py fold and simplify. A new fused op type registers a Rule of its own (in a module
here, or anywhere imported before lowering); nothing else in codegen names an op type.
"""

from __future__ import annotations

from codegen.ir import Kernel
from codegen.nodes import NodeSpec
from codegen.registry import Axis, OpInterface, Variant, rule_for
from codegen.rules import proximal, smooth_l1

BUILTIN_RULES = (smooth_l1, proximal)  # imported for the entries they register


def node_variant(spec: NodeSpec) -> Variant:
    """The variant axes of the kernel a node lowers to; checks the node's attributes and dtypes
    as lowering would, without lowering it."""
    return rule_for(spec.op_type).variant(spec)


def lower_node(spec: NodeSpec) -> Kernel:
    return rule_for(spec.op_type).lower(spec)


def axes_of(op_type: str) -> tuple[Axis, ...]:
    return rule_for(op_type).axes


def interface_of(op_type: str) -> OpInterface:
    return rule_for(op_type).interface
