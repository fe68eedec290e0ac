"""Errors of the CPU twin; both are BackendErrors with a one-line message."""

from __future__ import annotations

from runtime.backend import BackendError


class TwinRuleError(BackendError):
    """A kernel broke a hardware rule (the twin headers' rule id in `rule`)."""

    def __init__(self, kernel: str, rule: str, message: str, block: int) -> None:
        where = f" in block {block}" if block >= 0 else ""
        super().__init__(f"twin: kernel {kernel} breaks rule {rule}{where}: {message}")
        self.rule = rule
        self.block = block


class TwinCompileError(BackendError):
    """The emitted sources do not compile against the twin headers (first compiler error)."""
