"""The lowering rules of the fused op types: one registry entry per op type.

An entry holds all codegen knows of one op type: the rule that lowers a node to kernel IR, the
variant a node needs and the emitted operators its kernels belong to, each with its variant axes
(how the operator's tiling function tells its variants apart: codegen/variants.py) and its
interface (op name, outputs, attributes, dtypes: codegen/op_interface.py). A fused op type's
kernels go to CANN's operator where CANN's prototype expresses them, else to the project's own.
The contract of the op (contracts/fused_ops.py OP_SPECS) and this entry are all a new fused op
type needs on codegen's side; the emitter, the schedule and the runtime read both and never
branch on an op's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codegen.errors import CodegenError
from codegen.ir import Kernel
from codegen.nodes import NodeSpec
from contracts.errors import InternalError
from contracts.fused_ops import OP_SPECS

# How the tiling function recomputes an axis from a call; the axis values are in this order:
ONE_ELEMENT = "one_element"  # input `name` has one element: (no, yes)
STRING_ATTR = "string_attr"  # string attribute `name`: the axis values are its allowed values
ZERO_ATTR = "zero_attr"  # float attribute `name` is 0: (no, yes)
ONE_ATTR = "one_attr"  # float attribute `name` is 1: (yes, no)
FINITE_ATTR = "finite_attr"  # float attribute `name` is finite: (no, yes)
INPUT_DTYPE = "input_dtype"  # dtype of input `name`: the axis values are dtype names
# how input `name`'s shape meets input 0's (the output's): a subsequence of SHAPE_KINDS
INPUT_SHAPE = "input_shape"
AXIS_SOURCES = (ONE_ELEMENT, STRING_ATTR, ZERO_ATTR, ONE_ATTR, FINITE_ATTR, INPUT_DTYPE, INPUT_SHAPE)
# "tile": input 0's element count (numpy broadcasting then maps element i to element i);
# "scalar": one element (where the axis has it); "broadcast": any other shape that broadcasts to
# input 0's. The first that holds is the input's kind.
SHAPE_KINDS = ("tile", "scalar", "broadcast")


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]
    source: str  # one of AXIS_SOURCES
    reads: str  # the input or attribute the source reads

    def __post_init__(self) -> None:
        if self.source not in AXIS_SOURCES:
            raise InternalError(f"axis {self.name}: unknown source {self.source!r}")
        if self.source in (ONE_ELEMENT, ZERO_ATTR, ONE_ATTR, FINITE_ATTR) and len(self.values) != 2:
            raise InternalError(f"axis {self.name}: a {self.source} axis has two values")
        if self.source == INPUT_SHAPE and (self.values[:1] != ("tile",) or
                                           list(self.values) != [k for k in SHAPE_KINDS if k in self.values]):
            raise InternalError(f"axis {self.name}: an {INPUT_SHAPE} axis takes values of {SHAPE_KINDS} in that "
                                "order, starting with tile")

    def attribute_value(self, value: str) -> float | str | None:
        """The attribute value a variant with this axis value fixes, if it fixes one."""
        index = self.values.index(value)
        if self.source == STRING_ATTR:
            return value
        fixed = {ZERO_ATTR: (None, 0.0), ONE_ATTR: (1.0, None), FINITE_ATTR: (float("inf"), None)}
        return fixed[self.source][index] if self.source in fixed else None


@dataclass(frozen=True)
class Attribute:
    name: str
    kind: str  # "float" | "string" | "bool"
    default: float | str | bool
    cann: bool  # CANN's operator has it too
    doc: str


@dataclass(frozen=True)
class OpInterface:
    outputs: tuple[str, ...]  # OpDef output names, in the kernel's output order
    attributes: tuple[Attribute, ...]
    # CANN's dtype list, which every input and output of its operator takes alike; empty: the
    # dtype combinations the package's kernels take
    dtypes: tuple[str, ...] = ()


Variant = tuple[tuple[str, str], ...]


def _any_variant(dtype: str, variant: dict[str, str]) -> bool:
    return True


@dataclass(frozen=True)
class Operator:
    """One emitted operator a rule's kernels belong to: its op name, variant axes and interface.

    `axes` are a subsequence of the rule's; `accepts(dtype, variant)` says whether a kernel of the
    rule's full variant is this operator's (the axes it lacks then hold the values it implies).
    A rule lists CANN's operator first, then the project's own for what CANN's prototype cannot
    express, so a custom package never registers CANN's name with another prototype.
    """

    name: str
    axes: tuple[Axis, ...]
    interface: OpInterface
    accepts: Callable[[str, dict[str, str]], bool] = _any_variant
    cann: bool = False  # CANN's own operator: its prototype, exactly

    def project(self, variant: Variant) -> Variant:
        names = {a.name for a in self.axes}
        return tuple((k, v) for k, v in variant if k in names)


@dataclass(frozen=True)
class Rule:
    op_type: str
    lower: Callable[[NodeSpec], Kernel]  # node -> unoptimised kernel IR (named op_type, full variant)
    variant: Callable[[NodeSpec], Variant]  # node -> its full axis values (checks the node on the way)
    operators: tuple[Operator, ...]  # the emitted operators, in order of preference

    def operator(self, dtype: str, variant: Variant) -> Operator:
        """The first operator that takes a kernel of this dtype and full variant."""
        values = dict(variant)
        for op in self.operators:
            if op.accepts(dtype, values):
                return op
        raise CodegenError(f"{self.op_type}: no emitted operator takes a {dtype} kernel of variant {variant}")


RULES: dict[str, Rule] = {}
OPERATORS: dict[str, tuple[Operator, str]] = {}  # operator name -> (operator, the rule's op type)


def register_rule(rule: Rule) -> Rule:
    """Adds an op type's rule and its operators. Its contract (contracts/fused_ops.py) must be
    registered first: an interface attribute the contract also has must keep the contract's
    default, so the two cannot drift apart."""
    if rule.op_type in RULES and RULES[rule.op_type] is not rule:
        raise InternalError(f"a lowering rule for {rule.op_type} is registered already")
    contract = OP_SPECS.get(rule.op_type)
    if contract is None:
        raise InternalError(f"{rule.op_type} has no contract: register its OpSpec before its rule")
    if not rule.operators:
        raise InternalError(f"{rule.op_type}: a rule needs an operator")
    for op in rule.operators:
        for attr in op.interface.attributes:
            if attr.name in contract.attrs and contract.attrs[attr.name] != attr.default:
                raise InternalError(f"{op.name}: attribute {attr.name} defaults to {attr.default!r} in the "
                                    f"operator interface but to {contract.attrs[attr.name]!r} in the contract")
        owner = OPERATORS.get(op.name)
        if owner is not None and owner[1] != rule.op_type:
            raise InternalError(f"operator {op.name} belongs to {owner[1]} already")
    RULES[rule.op_type] = rule
    for op in rule.operators:
        OPERATORS[op.name] = (op, rule.op_type)
    return rule


def unregister_rule(op_type: str) -> None:
    """Removes an op type's rule and its operators (a test's toy op)."""
    rule = RULES.pop(op_type, None)
    for op in rule.operators if rule else ():
        OPERATORS.pop(op.name, None)


def rule_for(op_type: str) -> Rule:
    try:
        return RULES[op_type]
    except KeyError:
        raise CodegenError(f"no lowering rule for {op_type!r}") from None


def operator_named(name: str) -> Operator:
    """The emitted operator of this name (a kernel's op_type)."""
    try:
        return OPERATORS[name][0]
    except KeyError:
        raise CodegenError(f"no emitted operator {name!r}") from None


def contract_of(operator: str) -> str:
    """The fused op type whose nodes an emitted operator runs (its contract in OP_SPECS)."""
    try:
        return OPERATORS[operator][1]
    except KeyError:
        raise CodegenError(f"no emitted operator {operator!r}") from None
