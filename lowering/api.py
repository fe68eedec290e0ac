"""Python entry point for export pipelines: `fuse(model)`.

The onnx_ir pass object lives in lowering.ir_pass, imported on first use, because onnx_ir pulls
in sympy and would double the start-up time of every `lower` call.
"""

from __future__ import annotations

from typing import Any

import onnx

from .loading import LoadedModel, is_ir_model, load
from .report import FusionReport
from .rewrite import fuse_proto


def fuse(model: Any, *, recompute_shared: bool = True, by_meaning: bool = True,
         assume_finite: bool = False) -> tuple[Any, FusionReport]:
    """Fuses a model given as onnx.ModelProto, onnx_ir.Model or path.

    Returns the fused model in the same kind as given (a ModelProto for a path) and the report.
    The input is never modified. Raises lowering.LoweringError on bad input. With
    `recompute_shared` (the default), a match whose intermediates the rest of the graph also reads
    (a forward loss sharing |x| with its gradient after an optimizer merged them) fuses, and the
    nodes that compute those intermediates stay for their other readers; `recompute_shared=False`
    refuses such a match. `by_meaning=False` leaves out the
    recogniser (lowering.patterns.meaning) and fuses only the forms the patterns spell out.
    Every fusion is proved equal to its fused op (lowering.proof), +-inf and NaN inputs
    included; `assume_finite=True` waives those inputs (the report marks each fusion it allowed).
    """
    fused, report = fuse_loaded(load(model, background=True), recompute_shared=recompute_shared, by_meaning=by_meaning,
                                assume_finite=assume_finite)
    if is_ir_model(model):
        import onnx_ir

        return onnx_ir.serde.deserialize_model(fused), report
    return fused, report


def fuse_loaded(loaded: LoadedModel, recompute_shared: bool = True, by_meaning: bool = True,
                assume_finite: bool = False, beside: bool = False) -> tuple[onnx.ModelProto, FusionReport]:
    """fuse_proto on a loaded model whose ONNX check may still run in the background: its
    verdict is taken before the result is returned, and before the pass's own error when the
    pass fails (on a model the checker rejects, the checker says best what is wrong).
    `beside` is for the `lower` command, whose process is the pass's own: fuse() runs in a
    caller's process, which a fork would copy with its threads and handles."""
    try:
        result = fuse_proto(loaded.model, validated=loaded.pending is None, recompute_shared=recompute_shared,
                            by_meaning=by_meaning, assume_finite=assume_finite, beside=beside)
    except Exception:
        loaded.confirm()
        raise
    except BaseException:
        loaded.abandon()
        raise
    loaded.confirm()
    return result
