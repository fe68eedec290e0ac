"""Text from a model made safe for a terminal: no control characters, bounded length.

Node and value names are untrusted: a name may hold ANSI escapes, newlines, bidirectional
overrides or thousands of characters. Everything the command line prints passes model text
through `printable`. This module imports nothing heavy, so every layer may use it.
"""

from __future__ import annotations

NAME_LIMIT = 80
_ELLIPSIS = "..."


def printable(text: str, limit: int = NAME_LIMIT) -> str:
    """`text` with every non-printable character (control, format, separator) written as its
    Python escape (an ANSI escape shows as \\x1b[31m, a newline as \\n), then shortened to `limit`
    characters with an ellipsis in the middle, so both ends of a long name stay readable
    (`limit` 0: never shortened)."""
    text = str(text)
    shown = text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if limit and len(shown) > limit:
        keep = max(limit - len(_ELLIPSIS), 2)
        head = keep - keep // 2
        shown = shown[:head] + _ELLIPSIS + shown[len(shown) - keep // 2:]
    return shown
