"""The error codegen raises for a node or request it cannot handle: a one-line message."""

from __future__ import annotations

from contracts.errors import ToolError


class CodegenError(ToolError, ValueError):
    """A fused node codegen cannot lower, or a bad request (unknown target, bad size)."""
