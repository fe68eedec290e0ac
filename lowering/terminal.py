"""Text from a model made safe for a terminal: no control characters, bounded length.

Node and value names are untrusted: a name may hold ANSI escapes, newlines or thousands of
characters. Everything the command line prints passes model text through `printable`.
"""

from __future__ import annotations

import re

NAME_LIMIT = 80
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def printable(text: str, limit: int = NAME_LIMIT) -> str:
    """`text` with control and bidirectional-override characters escaped, shortened to `limit`
    characters with an ellipsis in the middle (both ends of a long name are the telling parts)."""
    escaped = _CONTROL.sub(_escape, str(text))
    if len(escaped) <= limit:
        return escaped
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return f"{escaped[:head]}…{escaped[-tail:]}"
