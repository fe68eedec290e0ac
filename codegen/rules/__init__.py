"""Lowering rules: one module per fused op type, each registering its entry (codegen/registry.py):
NodeSpec -> unoptimised kernel IR, the node's variant and the emitted operators (variant axes and
interface each). A kernel's op_type is the emitted operator's name.

Rules state the computation plainly (with constants as SConst); the generic passes in
codegen/passes.py fold and simplify. A new fused op type registers a Rule of its own (in a module
here, or anywhere imported before lowering); nothing else in codegen names an op type.
"""

from __future__ import annotations

from dataclasses import replace

from codegen.ir import Kernel
from codegen.nodes import NodeSpec
from codegen.registry import Axis, Operator, OpInterface, Variant, operator_named, rule_for
from codegen.rules import proximal, smooth_l1

BUILTIN_RULES = (smooth_l1, proximal)  # imported for the entries they register


def node_operator(spec: NodeSpec) -> tuple[Operator, Variant]:
    """The emitted operator a node's kernel belongs to and the kernel's variant (that operator's
    axes); checks the node's attributes and dtypes as lowering would, without lowering it."""
    rule = rule_for(spec.op_type)
    full = rule.variant(spec)
    dtype = next(iter(spec.inputs.values())).dtype
    op = rule.operator(dtype, full)
    return op, op.project(full)


def node_variant(spec: NodeSpec) -> Variant:
    return node_operator(spec)[1]


def lower_node(spec: NodeSpec) -> Kernel:
    """The node's kernel, named after its emitted operator, with that operator's variant."""
    rule = rule_for(spec.op_type)
    kernel = rule.lower(spec)
    op = rule.operator(kernel.dtype, kernel.variant)
    return replace(kernel, op_type=op.name, variant=op.project(kernel.variant))


def axes_of(operator: str) -> tuple[Axis, ...]:
    return operator_named(operator).axes


def interface_of(operator: str) -> OpInterface:
    return operator_named(operator).interface
