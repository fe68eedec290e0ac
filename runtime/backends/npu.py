"""The NPU backend: run the generated custom op on an Ascend device through CANN (ctypes).

Used only where a CANN toolkit is installed: ASCEND_HOME_PATH (or the default
/usr/local/Ascend/cann) must hold lib64/libascendcl.so and lib64/libnnopbase.so, and the custom-op
package built from `lower`'s kernels must be installed so that libcust_opapi.so is found under
ASCEND_CUSTOM_OPP_PATH or ASCEND_OPP_PATH/vendors/*/op_api/lib. Without them, creating the
backend raises BackendError saying what is missing.

Each call is the documented aclnn sequence: aclrtMalloc + aclrtMemcpy per tensor, aclCreateTensor,
aclnn<Op>GetWorkspaceSize(inputs..., attributes..., outputs..., &workspaceSize, &executor),
aclnn<Op>(workspace, size, executor, stream), aclrtSynchronizeStream, copy back, free. <Op> is
CANN's op type, which the emitted operator keeps; the attributes are the node's values in the
operator's order (codegen/op_interface.py: float as double, string as char *, bool as bool), and
an output the operator writes into an input (ApplyProximalGradientDescent's var) is no argument
of its own: it is copied back from that input's device buffer.
"""

from __future__ import annotations

import ctypes
import glob
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codegen.ir import Kernel
from codegen.op_interface import call_attributes, interface
from runtime.acl import AclDataType, AclFormat, AclrtMemcpyKind, acl_dtype
from runtime.backend import Backend, BackendError, KernelCall
from runtime.backends.cpu import artifact_for

DEFAULT_HOME = "/usr/local/Ascend/cann"


def _toolkit_home() -> Path:
    home = Path(os.environ.get("ASCEND_HOME_PATH") or DEFAULT_HOME)
    if not (home / "lib64" / "libascendcl.so").is_file():
        where = "ASCEND_HOME_PATH" if os.environ.get("ASCEND_HOME_PATH") else f"the default {DEFAULT_HOME}"
        raise BackendError(
            f"npu backend: no CANN toolkit at {home} ({where}; lib64/libascendcl.so missing); "
            "install the toolkit and source its set_env.sh, or use --backend cpu")
    return home


def _custom_opapi() -> Path:
    roots = [p for p in os.environ.get("ASCEND_CUSTOM_OPP_PATH", "").split(":") if p]
    candidates = [Path(r) / "op_api" / "lib" / "libcust_opapi.so" for r in roots]
    opp = os.environ.get("ASCEND_OPP_PATH")
    if opp:
        candidates += [Path(p) for p in sorted(glob.glob(os.path.join(opp, "vendors", "*", "op_api", "lib",
                                                                         "libcust_opapi.so")))]
    for c in candidates:
        if c.is_file():
            return c
    raise BackendError(
        "npu backend: libcust_opapi.so not found; build the generated kernels (kernels/<name>/build.sh), "
        "install the custom_opp_*.run package and source vendors/<name>/bin/set_env.bash")


class NpuBackend(Backend):
    name = "npu"

    def __init__(self, device_id: int = 0) -> None:
        home = _toolkit_home()
        self.device_id = device_id
        try:
            self.acl = ctypes.CDLL(str(home / "lib64" / "libascendcl.so"))
            self.nnop = ctypes.CDLL(str(home / "lib64" / "libnnopbase.so"))
            self.cust = ctypes.CDLL(str(_custom_opapi()))
        except OSError as exc:
            raise BackendError(f"npu backend: cannot load the CANN libraries: {exc}") from None
        self.acl.aclrtMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]
        self.acl.aclrtMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                         ctypes.c_size_t, ctypes.c_int]
        self.acl.aclrtFree.argtypes = [ctypes.c_void_p]
        self.acl.aclrtSynchronizeStream.argtypes = [ctypes.c_void_p]
        self.acl.aclGetRecentErrMsg.restype = ctypes.c_char_p
        self.nnop.aclCreateTensor.restype = ctypes.c_void_p
        self.nnop.aclCreateTensor.argtypes = [
            ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
            ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, ctypes.c_void_p]
        self.nnop.aclDestroyTensor.argtypes = [ctypes.c_void_p]
        self._check(self.acl.aclInit(None), "aclInit")
        self._check(self.acl.aclrtSetDevice(ctypes.c_int32(device_id)), "aclrtSetDevice")
        self.stream = ctypes.c_void_p()
        self._check(self.acl.aclrtCreateStream(ctypes.byref(self.stream)), "aclrtCreateStream")

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            msg = self.acl.aclGetRecentErrMsg() or b""
            raise BackendError(f"npu backend: {what} returned {status}: {msg.decode(errors='replace')}")

    def _device_tensor(self, arr: np.ndarray, owned: list[ctypes.c_void_p]) -> ctypes.c_void_p:
        arr = np.asarray(arr, order="C")
        ptr = ctypes.c_void_p()
        self._check(self.acl.aclrtMalloc(ctypes.byref(ptr), max(arr.nbytes, 1), 0), "aclrtMalloc")
        owned.append(ptr)
        if arr.nbytes:
            self._check(self.acl.aclrtMemcpy(ptr, arr.nbytes, arr.ctypes.data, arr.nbytes,
                                             AclrtMemcpyKind.HOST_TO_DEVICE), "aclrtMemcpy")
        dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
        strides = (ctypes.c_int64 * max(arr.ndim, 1))(*(s // arr.itemsize for s in arr.strides))
        dt = acl_dtype(arr.dtype)
        if dt is AclDataType.UNDEFINED:
            raise BackendError(f"npu backend: no aclDataType for {arr.dtype}")
        tensor = self.nnop.aclCreateTensor(dims, arr.ndim, int(dt), strides, 0, int(AclFormat.ND),
                                           dims, arr.ndim, ptr)
        if not tensor:
            raise BackendError("npu backend: aclCreateTensor failed")
        return ctypes.c_void_p(tensor)

    def run(self, call: KernelCall) -> dict[str, np.ndarray]:
        art = artifact_for(call.spec, call.target)
        kernel = art.kernel
        plan = aclnn_arguments(kernel)
        first = np.asarray(call.inputs[kernel.inputs[0].name])
        results = {p.name: np.empty(first.shape, first.dtype) for p in kernel.outputs}
        owned: list[ctypes.c_void_p] = []
        tensors: list[ctypes.c_void_p] = []
        device: dict[str, ctypes.c_void_p] = {}  # contract name -> device buffer
        args: list[object] = []
        try:
            for arg in plan:
                if arg.kind == "tensor":
                    host = results[arg.name] if arg.name in results else np.asarray(call.inputs[arg.name])
                    tensor = self._device_tensor(host, owned)
                    tensors.append(tensor)
                    device[arg.name] = owned[-1]
                    args.append(tensor)
                else:
                    args.append(_c_value(arg.kind, arg.value))
            ws_size, executor = ctypes.c_uint64(0), ctypes.c_void_p()
            phase1 = getattr(self.cust, f"aclnn{art.op_name}GetWorkspaceSize", None)
            phase2 = getattr(self.cust, f"aclnn{art.op_name}", None)
            if phase1 is None or phase2 is None:
                raise BackendError(f"npu backend: the installed package has no aclnn{art.op_name}; "
                                   "rebuild and install the kernels lower generated for this model")
            self._check(phase1(*args, ctypes.byref(ws_size), ctypes.byref(executor)),
                        f"aclnn{art.op_name}GetWorkspaceSize")
            workspace = ctypes.c_void_p()
            if ws_size.value:
                self._check(self.acl.aclrtMalloc(ctypes.byref(workspace), ws_size.value, 0), "aclrtMalloc")
                owned.append(workspace)
            self._check(phase2(workspace, ws_size, executor, self.stream), f"aclnn{art.op_name}")
            self._check(self.acl.aclrtSynchronizeStream(self.stream), "aclrtSynchronizeStream")
            for out_name, out in results.items():
                if out.nbytes:
                    self._check(self.acl.aclrtMemcpy(out.ctypes.data, out.nbytes, device[out_name], out.nbytes,
                                                     AclrtMemcpyKind.DEVICE_TO_HOST), "aclrtMemcpy")
        finally:
            for t in tensors:
                self.nnop.aclDestroyTensor(t)
            for ptr in owned:
                self.acl.aclrtFree(ptr)
        return results


@dataclass(frozen=True)
class AclnnArgument:
    kind: str  # "tensor" | "float" | "string" | "bool"
    name: str  # a contract input or output name, or the attribute's name
    value: float | str | bool | None = None  # an attribute's value


def aclnn_arguments(kernel: Kernel) -> list[AclnnArgument]:
    """The first phase's arguments before workspace size and executor, as the emitted operator's
    aclnn API takes them: the inputs, the attributes (codegen/op_interface.py order), then the
    outputs."""
    iface = interface(kernel.op_type)
    values = call_attributes(kernel)
    args = [AclnnArgument("tensor", p.name) for p in kernel.inputs]
    args += [AclnnArgument(a.kind, a.name, values[a.name]) for a in iface.attributes]
    args += [AclnnArgument("tensor", p.name) for p in kernel.outputs]
    return args


def _c_value(kind: str, value: float | str | bool | None) -> object:
    if kind == "float":
        return ctypes.c_double(float(value))  # type: ignore[arg-type]
    if kind == "bool":
        return ctypes.c_bool(bool(value))
    return ctypes.c_char_p(str(value).encode())
