"""The tool's exception types. Every error raised on purpose derives from ToolError, whose
`user_error` says who is at fault: the input or the request (the CLI exits 2 with the message as
one line) or the tool itself, a broken invariant found by a check (exit 3, a bug to report)."""

from __future__ import annotations

from typing import ClassVar


class ToolError(Exception):
    """Base of the errors this package raises on purpose."""

    user_error: ClassVar[bool] = True


class LoweringError(ToolError):
    """Bad input or an impossible request; the CLI prints the message and exits with code 2."""


class InternalError(ToolError):
    """A check of the tool's own invariants failed: a bug, whatever the input."""

    user_error = False
