"""How the pass reads ONNX protos: value types, tensor values, node attributes."""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import numpy_helper

from contracts.errors import LoweringError


class HasAttributes(Protocol):
    """A NodeProto, or the pass's decoded node (lowering.graph.Node)."""

    @property
    def attribute(self) -> Any: ...


Dim = int | str | None  # a number, a symbolic name, or unknown
Shape = tuple[Dim, ...] | None  # None: rank unknown


class ValueType:
    """Element type and shape of a value; numel is None unless every dimension is a number."""

    __slots__ = ("elem_type", "shape", "numel")

    def __init__(self, elem_type: int, shape: Shape) -> None:
        self.elem_type = elem_type
        self.shape = shape
        dims = [d for d in shape if type(d) is int] if shape is not None else []
        self.numel = math.prod(dims) if shape is not None and len(dims) == len(shape) else None

    def __repr__(self) -> str:
        return f"ValueType(elem_type={self.elem_type}, shape={self.shape})"


def is_complete(vt: ValueType | None) -> bool:
    """Whether a type knows its rank and every dim (a number or a symbolic name)."""
    return vt is not None and vt.shape is not None and None not in vt.shape


def value_type_of(vi: onnx.ValueInfoProto) -> ValueType | None:
    return type_of_type_proto(vi.type)


def type_of_type_proto(tp: onnx.TypeProto) -> ValueType | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    shape: Shape = None
    if tt.HasField("shape"):
        dims: list[Dim] = []
        for d in tt.shape.dim:
            kind = d.WhichOneof("value")
            dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
        shape = tuple(dims)
    return ValueType(tt.elem_type, shape)


_FAST_DTYPES: dict[int, np.dtype] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.INT32: np.dtype(np.int32),
}


def tensor_value(t: onnx.TensorProto) -> np.ndarray:
    """numpy_helper.to_array with a fast path for the common raw-data layouts (it is the
    largest single cost of reading constants in big graphs). The ONNX checker passes tensors
    whose data does not fit their dims or whose data type is unknown: those are bad input."""
    try:
        return _tensor_value(t)
    except (ValueError, KeyError, TypeError) as exc:
        what = f"tensor {t.name!r}" if t.name else "a constant tensor"
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        raise LoweringError(f"{what} cannot be read ({type(exc).__name__}: {first_line}): "
                            f"its data does not match its data type {t.data_type} and dims {list(t.dims)}") from None


def _tensor_value(t: onnx.TensorProto) -> np.ndarray:
    dtype = _FAST_DTYPES.get(t.data_type)
    if dtype is not None and t.HasField("raw_data") and t.data_location != onnx.TensorProto.EXTERNAL:
        return np.frombuffer(t.raw_data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(tuple(t.dims))
    if t.data_type == onnx.TensorProto.FLOAT and t.float_data:
        data, dims = t.float_data, t.dims
        if len(data) == 1 and not dims:  # a scalar: numpy converts a protobuf container element by element
            return np.array(data[0], np.float32)
        return np.array(data, np.float32).reshape(tuple(dims))
    if t.data_type == onnx.TensorProto.INT64 and t.int64_data:
        return np.array(t.int64_data, np.int64).reshape(tuple(t.dims))
    return numpy_helper.to_array(t)


def constant_node_value(node: HasAttributes) -> np.ndarray | None:
    """The value of a Constant node, for every attribute form a Constant can carry."""
    for attr in node.attribute:
        if attr.name == "value":
            return tensor_value(attr.t)
        if attr.name == "value_float":
            return np.array(attr.f, np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), np.int64)
    return None


def attr(node: HasAttributes, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default
