"""The error codegen raises for a node or request it cannot handle: a one-line message."""


class CodegenError(ValueError):
    """A fused node codegen cannot lower, or a bad request (unknown target, bad size)."""
