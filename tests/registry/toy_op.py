"""A toy fused op type, registered by the test that uses it: the squared-error backward,
gradient = scale * (predict - label) * dout. It is the contract, the pattern and the lowering
rule a new fused op needs, and nothing else."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from codegen.ir import Kernel, KernelBuilder, Kind, Op
from codegen.nodes import NodeSpec
from codegen.registry import ONE_ELEMENT, Attribute, Axis, Operator, OpInterface, Rule
from codegen.rules.common import common_dtype, load_f32, store
from contracts.fused_ops import AttrSpec, OpSpec, ProofSpec
from lowering.algebra import Algebra
from lowering.patterns.base import Match, Pattern

OP = "SquaredErrorGrad"


def _golden(x: Mapping[str, np.ndarray], a: Mapping[str, object]) -> tuple[np.ndarray, ...]:
    p, label, dout = (np.asarray(x[k], np.float64) for k in ("predict", "label", "dout"))
    return (float(a["scale"]) * (p - label) * dout,)  # type: ignore[arg-type]


def _contract(m: Any, x: Mapping[str, Any], p: Mapping[str, Any], a: Mapping[str, object]) -> Any:
    """The formula the proof compares a match with: scale * (predict - label) * dout."""
    return m.mul(m.mul(p["scale"], m.sub(x["predict"], x["label"])), x["dout"])


def _derive(a: Mapping[str, object], at: Callable[..., Fraction | None], snap: Callable[[float], Fraction],
            big: Fraction, known: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """The scale is what the region gives at predict = 1, label = 0, dout = 1."""
    value = at(predict=1, label=0, dout=1)
    return {} if value is None else {"scale": value / known.get("dout", Fraction(1))}


CONTRACT = OpSpec(
    OP,
    inputs=("predict", "label", "dout"),
    outputs=("gradient",),
    scalar_inputs=(),
    attr_specs=(AttrSpec("scale", 2.0),),
    reference=_golden,
    formula="gradient = scale * (predict - label) * dout",
    example_scalars={"dout": 0.5},
    proof=ProofSpec(_contract, _derive, lambda a: {"scale": Fraction(float(a["scale"]))}),  # type: ignore[arg-type]
)


def _match(alg: Algebra, i: int) -> Match | None:
    """Mul(Mul(Sub(predict, label), scale), dout), in either operand order."""
    node = alg.index.nodes[i]
    for scaled, dout in (node.input, node.input[::-1]):
        inner = alg.producer(scaled, "Mul")
        if inner is None:
            continue
        j, mul = inner
        for diff, const in (mul.input, mul.input[::-1]):
            scale = alg.scalar(const)
            sub = alg.producer(diff, "Sub")
            if scale is None or sub is None:
                continue
            k, sub_node = sub
            dtype = alg.index.elem_type(node.output[0])
            assert dtype is not None
            return Match("toy/squared_error", OP, node.output[0], dtype,
                         [sub_node.input[0], sub_node.input[1], dout], {"scale": scale}, {i, j, k})
    return None


PATTERN = Pattern("toy", frozenset({"Mul"}), _match)


def _variant(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    common_dtype(spec, ("predict", "label", "dout"))
    return (("dout", "scalar" if spec.inputs["dout"].numel() == 1 else "tile"),)


def _lower(spec: NodeSpec) -> Kernel:
    dtype = common_dtype(spec, ("predict", "label", "dout"))
    variant = _variant(spec)
    scalar_dout = variant[0][1] == "scalar"
    b = KernelBuilder(spec.op_type, dtype, variant)
    b.input("predict", dtype)
    b.input("label", dtype)
    b.input("dout", dtype, Kind.SCALAR if scalar_dout else Kind.TILE)
    b.output("gradient", dtype)
    factor = b.sattr("scale", float(spec.attrs["scale"]))  # type: ignore[arg-type]
    if scalar_dout:
        factor = b.sop(Op.SMUL, b.sinput("dout"), factor)
    x = b.binary(Op.SUB, load_f32(b, "predict"), load_f32(b, "label"))
    if not scalar_dout:
        x = b.binary(Op.MUL, x, load_f32(b, "dout"))
    store(b, "gradient", b.tile_scalar(Op.MULS, x, factor), dtype)
    return b.build()


RULE = Rule(
    OP,
    lower=_lower,
    variant=_variant,
    operators=(Operator(
        OP,
        axes=(Axis("dout", ("tile", "scalar"), ONE_ELEMENT, "dout"),),
        interface=OpInterface(
            outputs=("gradient",),
            attributes=(Attribute("scale", "float", 2.0, False, "the factor on the gradient"),),
        ),
    ),),
)
