"""Names: op-type case conversion and sanitising of text that comes from a model.

Model-derived text (node names) never reaches a path or a C++ identifier: paths and identifiers
are built from the fused-op contract (op types, parameter names) and a hash of the IR. Node
names only appear in documentation, after `safe_text`, and on the terminal, after
`lowering.terminal.printable`.
"""

from __future__ import annotations

import re

_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def snake_case(op_type: str) -> str:
    """CANN's rule: '_' before an uppercase letter that follows a lowercase letter or digit."""
    return _SNAKE.sub("_", op_type).lower()


def safe_text(text: str, max_len: int = 64) -> str:
    """Model text reduced to [A-Za-z0-9_.-] (others become '_'), at most max_len characters.

    Leading dots are replaced too, so the result is never '..' or a hidden name.
    """
    cleaned = _UNSAFE.sub("_", text)[:max_len]
    cleaned = re.sub(r"^\.+", lambda m: "_" * len(m.group()), cleaned)
    return cleaned or "_"


def check_identifier(name: str) -> str:
    """Return name if it is a plain ASCII C identifier; raise ValueError otherwise."""
    if not _IDENT.match(name):
        raise ValueError(f"not a safe identifier: {name!r}")
    return name


def camel(name: str) -> str:
    """'var_out' -> 'VarOut' (parameter names to C++ member names)."""
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def lower_camel(name: str) -> str:
    """'shrink_max' -> 'shrinkMax' (attribute and axis names to C++ local variables)."""
    c = camel(name)
    return c[:1].lower() + c[1:]
