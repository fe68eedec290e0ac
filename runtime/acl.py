"""ACL runtime surface (emulated): status codes, data types, device memory, streams, aclTensor.

Names follow CANN (acl_rt.h, aclnn docs) so code written against this shim reads like code for the
real runtime. Pointers become Python objects: a `DevicePtr` is a block of emulated device memory,
`None` plays nullptr. Device memory lives on the host for every backend: a backend copies it to a
real device only inside its kernel launch (see runtime/backend.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import ml_dtypes
import numpy as np


class AclnnStatus(IntEnum):
    """aclnnStatus / aclError values (opbase op_errno.h)."""

    SUCCESS = 0
    PARAM_NULLPTR = 161001
    PARAM_INVALID = 161002
    RUNTIME_ERROR = 361001
    INNER = 561000
    INNER_INFERSHAPE = 561001
    INNER_TILING = 561002
    INNER_FIND_KERNEL = 561003


class AclDataType(IntEnum):
    UNDEFINED = -1
    FLOAT = 0
    FLOAT16 = 1
    INT8 = 2
    INT32 = 3
    UINT8 = 4
    INT16 = 6
    UINT16 = 7
    UINT32 = 8
    INT64 = 9
    UINT64 = 10
    DOUBLE = 11
    BOOL = 12
    BF16 = 27


class AclFormat(IntEnum):
    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2


class AclrtMemcpyKind(IntEnum):
    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


class AclrtMemMallocPolicy(IntEnum):
    HUGE_FIRST = 0
    HUGE_ONLY = 1
    NORMAL_ONLY = 2


_NUMPY_OF: dict[AclDataType, np.dtype] = {
    AclDataType.FLOAT: np.dtype(np.float32),
    AclDataType.FLOAT16: np.dtype(np.float16),
    AclDataType.BF16: np.dtype(ml_dtypes.bfloat16),
    AclDataType.DOUBLE: np.dtype(np.float64),
    AclDataType.INT8: np.dtype(np.int8),
    AclDataType.INT16: np.dtype(np.int16),
    AclDataType.INT32: np.dtype(np.int32),
    AclDataType.INT64: np.dtype(np.int64),
    AclDataType.UINT8: np.dtype(np.uint8),
    AclDataType.UINT16: np.dtype(np.uint16),
    AclDataType.UINT32: np.dtype(np.uint32),
    AclDataType.UINT64: np.dtype(np.uint64),
    AclDataType.BOOL: np.dtype(np.bool_),
}
_ACL_OF = {v: k for k, v in _NUMPY_OF.items()}
# Names the kernel IR uses for the floating types.
DTYPE_NAMES: dict[AclDataType, str] = {
    AclDataType.FLOAT: "float32",
    AclDataType.FLOAT16: "float16",
    AclDataType.BF16: "bfloat16",
}

DEVICE_ALIGN = 32  # aclCreateTensor wants a 32-byte aligned device address


def numpy_dtype(dt: AclDataType) -> np.dtype:
    return _NUMPY_OF[dt]


def acl_dtype(dt: np.dtype) -> AclDataType:
    """aclDataType of a numpy dtype (UNDEFINED when ACL has none)."""
    return _ACL_OF.get(np.dtype(dt), AclDataType.UNDEFINED)


class DevicePtr:
    """A block of emulated device memory (32-byte aligned, zero filled like a fresh page)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._raw = np.zeros(size + DEVICE_ALIGN, np.uint8)
        start = (-self._raw.ctypes.data) % DEVICE_ALIGN
        self.data = self._raw[start:start + size]
        self.freed = False

    def __repr__(self) -> str:
        return f"DevicePtr({self.size} bytes{', freed' if self.freed else ''})"


@dataclass
class Stream:
    """An ACL stream: launches queue up and run, in order, at aclrtSynchronizeStream."""

    pending: list[Callable[[], None]] = field(default_factory=list)
    destroyed: bool = False


@dataclass
class AclTensor:
    """aclTensor: a typed, strided view (strides and offset in elements) of device memory."""

    view_dims: tuple[int, ...]
    dtype: AclDataType
    strides: tuple[int, ...]
    offset: int
    format: AclFormat
    storage_dims: tuple[int, ...]
    data: DevicePtr

    @property
    def numel(self) -> int:
        return int(np.prod(self.view_dims, dtype=np.int64))

    def read(self) -> np.ndarray:
        """The tensor's values as a host array (a strided view into device memory)."""
        np_dt = numpy_dtype(self.dtype)
        flat = self.data.data[: self.data.size - self.data.size % np_dt.itemsize].view(np_dt)
        if self.numel == 0:
            return np.zeros(self.view_dims, np_dt)
        return np.lib.stride_tricks.as_strided(
            flat[self.offset:], shape=self.view_dims,
            strides=tuple(s * np_dt.itemsize for s in self.strides), writeable=True)

    def write(self, values: np.ndarray) -> None:
        self.read()[...] = values


_last_error = [""]


def set_recent_error(message: str) -> None:
    _last_error[0] = message


def aclGetRecentErrMsg() -> str:
    """The message of the last failed call, like ACL's aclGetRecentErrMsg."""
    return _last_error[0]


def aclrtMalloc(size: int, policy: AclrtMemMallocPolicy = AclrtMemMallocPolicy.HUGE_FIRST
                ) -> tuple[int, DevicePtr | None]:
    if size < 0:
        set_recent_error(f"aclrtMalloc: size {size} < 0")
        return AclnnStatus.PARAM_INVALID, None
    return AclnnStatus.SUCCESS, DevicePtr(int(size))


def aclrtFree(ptr: DevicePtr | None) -> int:
    if ptr is None:
        return AclnnStatus.PARAM_NULLPTR
    ptr.freed = True
    return AclnnStatus.SUCCESS


def _bytes_of(obj: DevicePtr | np.ndarray) -> np.ndarray:
    if isinstance(obj, DevicePtr):
        return obj.data
    return np.asarray(obj, order="C").reshape(-1).view(np.uint8)


def aclrtMemcpy(dst: DevicePtr | np.ndarray | None, dest_max: int,
                src: DevicePtr | np.ndarray | None, count: int, kind: AclrtMemcpyKind) -> int:
    """Copy `count` bytes; a host side is a numpy array (a writable contiguous one for dst)."""
    if dst is None or src is None:
        set_recent_error("aclrtMemcpy: null pointer")
        return AclnnStatus.PARAM_NULLPTR
    want_dst = isinstance(dst, DevicePtr)
    want_src = isinstance(src, DevicePtr)
    expected = {AclrtMemcpyKind.HOST_TO_HOST: (False, False), AclrtMemcpyKind.HOST_TO_DEVICE: (True, False),
                AclrtMemcpyKind.DEVICE_TO_HOST: (False, True), AclrtMemcpyKind.DEVICE_TO_DEVICE: (True, True)}
    if expected.get(AclrtMemcpyKind(kind)) != (want_dst, want_src):
        set_recent_error(f"aclrtMemcpy: pointers do not match kind {AclrtMemcpyKind(kind).name}")
        return AclnnStatus.PARAM_INVALID
    if any(isinstance(p, DevicePtr) and p.freed for p in (dst, src)):
        set_recent_error("aclrtMemcpy: device memory already freed")
        return AclnnStatus.PARAM_INVALID
    if isinstance(dst, np.ndarray) and not (dst.flags.c_contiguous and dst.flags.writeable):
        set_recent_error("aclrtMemcpy: host destination must be a writable contiguous array")
        return AclnnStatus.PARAM_INVALID
    d, s = _bytes_of(dst), _bytes_of(src)
    if count < 0 or count > dest_max or count > d.size or count > s.size:
        set_recent_error(f"aclrtMemcpy: count {count} exceeds destMax {dest_max} or a buffer size")
        return AclnnStatus.PARAM_INVALID
    d[:count] = s[:count]
    return AclnnStatus.SUCCESS


def aclrtCreateStream() -> tuple[int, Stream]:
    return AclnnStatus.SUCCESS, Stream()


def aclrtSynchronizeStream(stream: Stream | None) -> int:
    """Run the stream's queued launches in order; a failing launch fails the synchronize."""
    if stream is None:
        return AclnnStatus.SUCCESS
    if stream.destroyed:
        set_recent_error("aclrtSynchronizeStream: stream destroyed")
        return AclnnStatus.PARAM_INVALID
    pending, stream.pending = stream.pending, []
    for launch in pending:
        try:
            launch()
        except Exception as exc:  # a kernel failure surfaces as a runtime error status
            set_recent_error(f"kernel failed: {exc}")
            return AclnnStatus.RUNTIME_ERROR
    return AclnnStatus.SUCCESS


def aclrtDestroyStream(stream: Stream | None) -> int:
    if stream is None:
        return AclnnStatus.PARAM_NULLPTR
    stream.destroyed = True
    return AclnnStatus.SUCCESS


def aclCreateTensor(view_dims: tuple[int, ...] | list[int], data_type: AclDataType,
                    strides: tuple[int, ...] | list[int] | None, offset: int, fmt: AclFormat,
                    storage_dims: tuple[int, ...] | list[int], tensor_data: DevicePtr | None
                    ) -> AclTensor | None:
    """aclCreateTensor; returns None (nullptr) when the description is impossible."""
    dims = tuple(int(d) for d in view_dims)
    if tensor_data is None or any(d < 0 for d in dims) or data_type not in _NUMPY_OF:
        return None
    if strides is None:
        strides = tuple(int(np.prod(dims[i + 1:], dtype=np.int64)) for i in range(len(dims)))
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(dims) or offset < 0:
        return None
    itemsize = numpy_dtype(AclDataType(data_type)).itemsize
    if dims and all(d > 0 for d in dims):
        last = offset + sum((d - 1) * s for d, s in zip(dims, strides))
        if min(strides) < 0 or (last + 1) * itemsize > tensor_data.size:
            return None
    elif not dims and (offset + 1) * itemsize > tensor_data.size:
        return None
    return AclTensor(dims, AclDataType(data_type), strides, int(offset), AclFormat(fmt),
                     tuple(int(d) for d in storage_dims), tensor_data)


def aclDestroyTensor(tensor: AclTensor | None) -> int:
    return AclnnStatus.SUCCESS if tensor is not None else AclnnStatus.PARAM_NULLPTR


def tensor_from_numpy(array: np.ndarray) -> AclTensor:
    """Allocate device memory, copy `array` in, and describe it as a contiguous ND tensor."""
    array = np.asarray(array, order="C")
    dt = acl_dtype(array.dtype)
    if dt is AclDataType.UNDEFINED:
        raise TypeError(f"no aclDataType for numpy dtype {array.dtype}")
    _, ptr = aclrtMalloc(max(array.nbytes, 1))
    assert ptr is not None  # only a negative size fails
    aclrtMemcpy(ptr, ptr.size, array, array.nbytes, AclrtMemcpyKind.HOST_TO_DEVICE)
    tensor = aclCreateTensor(array.shape, dt, None, 0, AclFormat.ND, array.shape, ptr)
    assert tensor is not None  # a fresh contiguous buffer always fits its own shape
    return tensor


def tensor_to_numpy(tensor: AclTensor) -> np.ndarray:
    """Copy a tensor's values back to a new contiguous host array."""
    return np.array(tensor.read(), copy=True)
