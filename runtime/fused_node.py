"""Read a fused node of a fused model: is it one, and its attributes with defaults filled in."""

from __future__ import annotations

from typing import Any

import onnx

from lowering.fused_ops import DOMAIN, OP_SPECS, REDUCTIONS, SCALAR_FORMS


class FusedNodeError(ValueError):
    """A fused node that breaks the contract of lowering/fused_ops.py."""


def is_fused(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN and node.op_type in OP_SPECS


def fused_attrs(node: onnx.NodeProto) -> dict[str, object]:
    """Attributes of a fused node per OP_SPECS, defaults filled, strings decoded."""
    spec = OP_SPECS.get(node.op_type)
    if node.domain != DOMAIN or spec is None:
        raise FusedNodeError(f"node {node.name!r} ({node.domain}:{node.op_type}) is not a fused node")
    attrs: dict[str, Any] = dict(spec.attrs)
    for a in node.attribute:
        if a.name not in spec.attrs:
            raise FusedNodeError(f"node {node.name!r}: unknown attribute {a.name!r}")
        value = onnx.helper.get_attribute_value(a)
        # not UTF-8 from a hand-edited model: kept readable for the error that names the value
        attrs[a.name] = value.decode(errors="backslashreplace") if isinstance(value, bytes) else value
    if node.op_type == "SmoothL1LossGradV2":
        if attrs["reduction"] not in REDUCTIONS:
            raise FusedNodeError(f"node {node.name!r}: reduction {attrs['reduction']!r} not in {REDUCTIONS}")
        attrs["sigma"] = float(attrs["sigma"])
        attrs["scale"] = float(attrs["scale"])
    elif attrs["scalar_form"] not in SCALAR_FORMS:
        raise FusedNodeError(f"node {node.name!r}: scalar_form {attrs['scalar_form']!r} not in {SCALAR_FORMS}")
    if len(node.input) != len(spec.inputs) or len(node.output) != len(spec.outputs):
        raise FusedNodeError(
            f"node {node.name!r}: {node.op_type} takes {len(spec.inputs)} inputs and "
            f"{len(spec.outputs)} output, got {len(node.input)} and {len(node.output)}")
    return attrs
