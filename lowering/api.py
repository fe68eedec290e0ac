"""Python entry point for export pipelines: `fuse(model)`.

The onnx_ir pass object lives in lowering.ir_pass, imported on first use, because onnx_ir pulls
in sympy and would double the start-up time of every `lower` call.
"""

from __future__ import annotations

from typing import Any

from .fuse import fuse_proto
from .loading import is_ir_model, load
from .report import FusionReport


def fuse(model: Any) -> tuple[Any, FusionReport]:
    """Fuses a model given as onnx.ModelProto, onnx_ir.Model or path.

    Returns the fused model in the same kind as given (a ModelProto for a path) and the report.
    The input is never modified. Raises lowering.LoweringError on bad input.
    """
    loaded = load(model)
    fused, report = fuse_proto(loaded.model)
    if is_ir_model(model):
        import onnx_ir

        return onnx_ir.serde.deserialize_model(fused), report
    return fused, report
