"""ONNX graph pass: find and fuse SmoothL1-backward and proximal-gradient-descent subgraphs."""

from .api import FuseAscendPass, fuse
from .errors import LoweringError
from .report import FusionReport

__all__ = ["FuseAscendPass", "FusionReport", "LoweringError", "fuse"]
