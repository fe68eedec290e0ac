"""One module per pattern family; a new family adds its PATTERN here and a lowering rule in codegen."""

from . import proximal_gd, smooth_l1_grad

DEFAULT_PATTERNS = (smooth_l1_grad.PATTERN, proximal_gd.PATTERN)
