"""Read a fused node of a fused model: is it one, and its attributes with defaults filled in."""

from __future__ import annotations

import onnx

from contracts.errors import ToolError
from contracts.fused_ops import DOMAIN, OP_SPECS


class FusedNodeError(ToolError, ValueError):
    """A fused node that breaks the contract of contracts/fused_ops.py."""


def is_fused(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN and node.op_type in OP_SPECS


def fused_attrs(node: onnx.NodeProto) -> dict[str, object]:
    """Attributes of a fused node per OP_SPECS, defaults filled, strings decoded."""
    spec = OP_SPECS.get(node.op_type)
    if node.domain != DOMAIN or spec is None:
        raise FusedNodeError(f"node {node.name!r} ({node.domain}:{node.op_type}) is not a fused node")
    given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    try:
        attrs = spec.check_attrs(given)
    except ValueError as exc:
        raise FusedNodeError(f"node {node.name!r}: {exc}") from None
    if len(node.input) != len(spec.inputs) or len(node.output) != len(spec.outputs):
        raise FusedNodeError(
            f"node {node.name!r}: {node.op_type} takes {len(spec.inputs)} inputs and "
            f"{len(spec.outputs)} output, got {len(node.input)} and {len(node.output)}")
    return attrs
