"""Run an ONNX model on onnxruntime's CPU provider as a reference (graph optimizations off).

onnxruntime's Python API takes and returns no bfloat16 numpy arrays, so bfloat16 inputs go in as
OrtValues built from their bits, and bfloat16 outputs come back through an appended exact Cast to
float32 that is rounded back (exactly) to bfloat16 here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from contracts.errors import ToolError
from lowering.loading import save, serialized_or_none

_BF16 = np.dtype(ml_dtypes.bfloat16)


class OrtRunError(ToolError, RuntimeError):
    """onnxruntime could not load or run a model."""


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # errors come back as exceptions, which the caller words in one line; the C++ logger would
    # print them to stderr as well
    so.log_severity_level = 4
    serialized = serialized_or_none(model)
    try:
        if serialized is not None:
            return ort.InferenceSession(serialized, so, providers=["CPUExecutionProvider"])
        # over protobuf's 2 GB: onnxruntime reads such a model only from a file with external data
        with tempfile.TemporaryDirectory(prefix="lowering_ort_") as tmp:
            path = save(model, Path(tmp) / "model.onnx", external_data=True)[0]
            return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several unrelated exception types
        raise OrtRunError(f"onnxruntime cannot load the model: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _with_float_outputs(model: onnx.ModelProto, names: list[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Copy of `model` whose bfloat16 outputs `names` are exported through a Cast to float32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    taken = {o.name for o in m.graph.output}
    renamed: dict[str, str] = {}
    for name in names:
        new = f"{name}__as_float32"
        while new in taken:
            new += "_"
        taken.add(new)
        m.graph.node.append(helper.make_node("Cast", [name], [new], to=TensorProto.FLOAT))
        for out in m.graph.output:
            if out.name == name:
                out.CopyFrom(onnx.ValueInfoProto(name=new))
        renamed[name] = new
    return m, renamed


def _feed(value: np.ndarray) -> ort.OrtValue | np.ndarray:
    if value.dtype == _BF16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.asarray(value, order="C").view(np.uint16), TensorProto.BFLOAT16)
    return np.asarray(value, order="C")


class PreparedModel:
    """A model loaded into onnxruntime once, to run on many feeds (a loop body's segment runs
    once per iteration)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        sess = _session(model)
        bf16_out = [o.name for o in sess.get_outputs() if o.type == "tensor(bfloat16)"]
        self._renamed: dict[str, str] = {}
        if bf16_out:
            model, self._renamed = _with_float_outputs(model, bf16_out)
            sess = _session(model)
        self._session = sess
        self._wanted = {i.name for i in sess.get_inputs()}
        self._names = [o.name for o in sess.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every graph output by name."""
        ort_feeds = {k: _feed(np.asarray(v)) for k, v in feeds.items() if k in self._wanted}
        missing = sorted(self._wanted - set(ort_feeds))
        if missing:
            raise OrtRunError(f"no value for model input(s) {', '.join(missing)}")
        try:
            quiet = ort.RunOptions()
            quiet.log_severity_level = 4
            values = self._session.run_with_ort_values(self._names, {k: v if isinstance(v, ort.OrtValue)
                                                                     else ort.OrtValue.ortvalue_from_numpy(v)
                                                                     for k, v in ort_feeds.items()}, quiet)
        except Exception as exc:  # onnxruntime raises several unrelated exception types
            raise OrtRunError(f"onnxruntime failed: {_first_line(exc)}") from None
        back = {v: k for k, v in self._renamed.items()}
        result: dict[str, np.ndarray] = {}
        for name, value in zip(self._names, values):
            arr = value.numpy()
            if name in back:
                result[back[name]] = arr.astype(_BF16)
            else:
                result[name] = arr
        return result


def run_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run `model` on `feeds`; returns every graph output by name."""
    return PreparedModel(model).run(feeds)
