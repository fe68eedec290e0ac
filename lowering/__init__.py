"""ONNX graph pass: find and fuse SmoothL1-backward and proximal-gradient-descent subgraphs."""

from .api import fuse
from .errors import LoweringError
from .report import FusionReport

__all__ = ["FuseAscendPass", "FusionReport", "LoweringError", "fuse"]


def __getattr__(name: str):
    if name == "FuseAscendPass":  # imported on first use: onnx_ir is slow to import
        from .ir_pass import FuseAscendPass

        return FuseAscendPass
    raise AttributeError(f"module 'lowering' has no attribute {name!r}")
