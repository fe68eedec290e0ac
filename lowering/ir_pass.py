"""The pass as an onnx_ir FunctionalPass, for pipelines built on onnx_ir passes."""

from __future__ import annotations

import onnx_ir
from onnx_ir.passes import FunctionalPass, PassResult

from .api import fuse
from .report import FusionReport


class FuseAscendPass(FunctionalPass):
    """`FuseAscendPass()(model)` returns a PassResult with the fused model.

    The last report is kept on `self.report`, so pipelines can log why something did not fuse.
    """

    def __init__(self, recompute_shared: bool = True, by_meaning: bool = True, assume_finite: bool = False) -> None:
        super().__init__()
        self.recompute_shared = recompute_shared  # see lowering.rewrite
        self.by_meaning = by_meaning
        self.assume_finite = assume_finite
        self.report: FusionReport | None = None

    def call(self, model: onnx_ir.Model) -> PassResult:
        fused, self.report = fuse(model, recompute_shared=self.recompute_shared, by_meaning=self.by_meaning,
                                  assume_finite=self.assume_finite)
        return PassResult(fused, modified=bool(self.report.fusions))
