"""The registry of matched forms: one record per form a pattern family recognises by its syntax.

A pattern module lists its forms in the order it tries them and runs their matchers from that
list; docs/matched-forms.md is generated from the same records (python -m
lowering.patterns.forms_doc), so what the document says is matched is what the code tries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# where a form was seen: the exporter labels of tests/fixtures/*/manifest.json, and the other
# sources the tests build graphs after -> how the document names them
EXPORTERS: dict[str, str] = {
    "dynamo": "PyTorch dynamo exporter",
    "dynamo-optimized": "PyTorch dynamo exporter with its optimizer",
    "torchscript": "PyTorch TorchScript exporter",
    "tf2onnx": "TensorFlow through tf2onnx",
    "jax2onnx": "JAX through jax2onnx",
    "onnxruntime-training": "onnxruntime-training",
    "paddle2onnx": "Paddle through paddle2onnx",
    "onnxconverter-common float16": "onnxconverter-common's float16 conversion",
    "onnxsim": "onnxsim, onnxslim and onnxoptimizer",
    "mindspore": "MindSpore's SmoothL1LossGrad (its CPU kernel, written with onnx.helper)",
    "hand-written": "ONNX written by hand",
}

MatcherT = TypeVar("MatcherT", bound=Callable[..., object])


@dataclass(frozen=True)
class Form(Generic[MatcherT]):
    """One form a family matches. `formula` is what the form computes, in the notation of the
    family's contract; `spellings` are the graph spellings of it the matcher accepts; the names a
    report gives its fusions are family/<one of reported_as> (the form's name unless the spelling
    decides)."""

    family: str
    name: str
    formula: str
    spellings: tuple[str, ...]
    seen_from: tuple[str, ...]  # keys of EXPORTERS
    fused_op: str
    matcher: MatcherT
    caveats: tuple[str, ...] = ()  # what the report can note for a fusion of this form
    reported_as: tuple[str, ...] = field(default=())

    def report_names(self) -> tuple[str, ...]:
        """The pattern names a fusion of this form carries in the report."""
        return tuple(f"{self.family}/{name}" for name in (self.reported_as or (self.name,)))


FoundT = TypeVar("FoundT")


def first_found(forms: Iterable[Form[Callable[..., FoundT | None]]], *args: object) -> FoundT | None:
    """What the first of the forms' matchers that finds something returns, each given args in
    the order of forms; None when none does. A matcher's NoMatch ends the search: the near miss is
    that form's."""
    for form in forms:
        found = form.matcher(*args)
        if found is not None:
            return found
    return None
