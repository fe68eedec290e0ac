"""Python entry points for export pipelines: `fuse(model)` and an onnx_ir pass object."""

from __future__ import annotations

from typing import Any

import onnx_ir
from onnx_ir.passes import FunctionalPass, PassResult

from .fuse import fuse_proto
from .loading import load
from .report import FusionReport


def fuse(model: Any) -> tuple[Any, FusionReport]:
    """Fuses a model given as onnx.ModelProto, onnx_ir.Model or path.

    Returns the fused model in the same kind as given (a ModelProto for a path) and the report.
    Raises lowering.LoweringError on bad input.
    """
    loaded = load(model)
    fused, report = fuse_proto(loaded.model)
    if isinstance(model, onnx_ir.Model):
        return onnx_ir.serde.deserialize_model(fused), report
    return fused, report


class FuseAscendPass(FunctionalPass):
    """onnx_ir pass: `FuseAscendPass()(model)` returns a PassResult with the fused model.

    The last report is kept on `self.report`, so pipelines can log why something did not fuse.
    """

    def __init__(self) -> None:
        super().__init__()
        self.report: FusionReport | None = None

    def call(self, model: onnx_ir.Model) -> PassResult:
        fused, self.report = fuse(model)
        return PassResult(fused, modified=bool(self.report.fusions))

