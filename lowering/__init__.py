"""ONNX graph pass: find and fuse SmoothL1-backward and proximal-gradient-descent subgraphs.

The package's public names load on first use, so that codegen and runtime can import the model
helpers (loading, graph, onnx_values, local_types, terminal) without loading the pass.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["FuseAscendPass", "FusionReport", "LoweringError", "fuse"]

_PUBLIC = {
    "fuse": ".api",
    "FusionReport": ".report",
    "LoweringError": "contracts.errors",
    "FuseAscendPass": ".ir_pass",  # onnx_ir is slow to import
}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'lowering' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value
    return value
