"""The NPU backend: run the generated custom op on an Ascend device through CANN (ctypes).

Used only where a CANN toolkit is installed (runtime/npu/toolkit.py finds it: ASCEND_HOME_PATH,
ASCEND_TOOLKIT_HOME, then the default install paths) and the custom-op packages built from
`lower`'s kernels are installed, one per operator, each as its own vendor (runtime/npu/packages.py
finds each operator's libcust_opapi.so as CANN does: ASCEND_CUSTOM_OPP_PATH, then
vendors/config.ini load_priority). Without them, creating the backend (or the first call of an
operator no package has) raises BackendError saying where it looked and what is missing.

Every backend of the process shares one ACL runtime (runtime/npu/acl_runtime.py: aclInit once,
everything released at exit) and has a stream of its own, released by `close()` or at the end of
a `with` block. A backend can run from any thread: each call first makes the device's context
current in the calling thread. Calls on one backend are serialised (they share its stream).

What it found (the toolkit, the package each operator comes from; not with `quiet`) and what
looks wrong (a package not built from this model's kernels, per its build stamp) goes to
`notify`, by default one `npu backend: ...` line on stderr.

Each call is the documented aclnn sequence: aclrtMalloc per tensor (aclrtMemcpy of each input),
aclCreateTensor, aclnn<Op>GetWorkspaceSize(inputs..., attributes..., outputs..., &workspaceSize,
&executor), aclnn<Op>(workspace, size, executor, stream), aclrtSynchronizeStream, a copy back of
every output, free. <Op> is the kernel's emitted operator (codegen/registry.py: CANN's name where
CANN's prototype expresses the node, else the project's own), each from the package that serves
it; the attributes are the node's values in the operator's order (codegen/op_interface.py: float
as double, string as char *, bool as bool). No operator writes into an input: every output has a
device buffer of its own.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import numpy as np

from codegen.artifact import KernelArtifact
from codegen.ir import Kernel
from codegen.op_interface import call_attributes, interface
from runtime.acl import AclDataType, AclFormat, AclrtMemcpyKind, acl_dtype
from runtime.backend import Backend, BackendError, KernelCall
from runtime.backends.cpu import artifact_for
from runtime.npu.acl_runtime import shared_runtime
from runtime.npu.packages import OpEntry, OpResolver, find_packages, stamp_problem
from runtime.numerics import NUMPY_DTYPES


def _to_stderr(message: str) -> None:
    print(f"npu backend: {message}", file=sys.stderr)


class NpuBackend(Backend):
    name = "npu"

    def __init__(self, device_id: int = 0, notify: Callable[[str], None] | None = None,
                 quiet: bool = False) -> None:
        if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
            raise BackendError(f"npu backend: device_id must be a non-negative integer, got {device_id!r}")
        say = notify or _to_stderr
        self._warn = say
        self._notify = (lambda message: None) if quiet else say
        self.runtime = shared_runtime(self._notify)
        toolkit = self.runtime.toolkit
        search = find_packages(toolkit.opp_path, toolkit.opp_source)
        if not search.packages:
            raise BackendError(
                "npu backend: no custom-op package installed; looked at " + "; ".join(search.looked)
                + ". Build the kernels lower generated (kernels/<op>/build.sh), install their custom_opp_*.run "
                "and, if it was installed with --install-path, source its bin/set_env.bash")
        self._ops = OpResolver(search, self._notify)
        self._entries: dict[str, OpEntry] = {}
        self._checked: set[tuple[str, int]] = set()
        self.device_id = device_id
        self._lock = threading.Lock()
        self._stream: ctypes.c_void_p | None = self.runtime.open_stream(device_id)

    @property
    def acl(self) -> ctypes.CDLL:
        return self.runtime.acl

    @property
    def nnop(self) -> ctypes.CDLL:
        return self.runtime.nnop

    def close(self) -> None:
        """Release the backend's stream (the runtime itself stays until exit). Idempotent."""
        with self._lock:
            if self._stream is not None:
                stream, self._stream = self._stream, None
                self.runtime.close_stream(stream)

    def __enter__(self) -> NpuBackend:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check(self, status: int, what: str) -> None:
        self.runtime.check(status, what)

    def _entry(self, art: KernelArtifact) -> OpEntry:
        """The operator's aclnn API; the first call of each variant also checks the package's
        build stamp against the kernel this run needs."""
        entry = self._entries.get(art.op_name)
        if entry is None:
            entry = self._entries[art.op_name] = self._ops.resolve(art.op_name)
        if (art.op_name, art.key_base) not in self._checked:
            self._checked.add((art.op_name, art.key_base))
            problem = stamp_problem(entry.package.library, art)
            if problem is not None:
                self._warn(f"warning: aclnn{art.op_name} comes from {entry.package.describe()}, but {problem}; "
                             f"rebuild kernels/{art.file_stem} (build.sh) and install its custom_opp_*.run")
        return entry

    def _device_tensor(self, arr: np.ndarray, owned: list[ctypes.c_void_p], upload: bool) -> ctypes.c_void_p:
        """An aclTensor over new device memory of arr's shape and dtype, holding arr's values when
        `upload` (an input), else left for the operator to write (an output)."""
        arr = np.asarray(arr, order="C")
        ptr = ctypes.c_void_p()
        self._check(self.acl.aclrtMalloc(ctypes.byref(ptr), max(arr.nbytes, 1), 0), "aclrtMalloc")
        owned.append(ptr)
        if upload and arr.nbytes:
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
        with self._lock:
            if self._stream is None:
                raise BackendError("npu backend: run() after close()")
            self.runtime.bind(self.device_id)
            return self._run(call, self._stream)

    def _run(self, call: KernelCall, stream: ctypes.c_void_p) -> dict[str, np.ndarray]:
        art = artifact_for(call.spec, call.target)
        kernel = art.kernel
        entry = self._entry(art)
        plan = aclnn_arguments(kernel)
        first = np.asarray(call.inputs[kernel.inputs[0].name])
        # the node's dtypes, whatever the caller's arrays hold: the operator checks them
        dtypes = {p.name: NUMPY_DTYPES[p.dtype] for p in [*kernel.inputs, *kernel.outputs]}
        results = {p.name: np.empty(first.shape, dtypes[p.name]) for p in kernel.outputs}
        owned: list[ctypes.c_void_p] = []
        tensors: list[ctypes.c_void_p] = []
        device: dict[str, ctypes.c_void_p] = {}  # contract name -> device buffer
        args: list[object] = []
        try:
            for arg in plan:
                if arg.kind == "tensor":
                    is_output = arg.name in results
                    host = results[arg.name] if is_output else np.asarray(call.inputs[arg.name], dtypes[arg.name])
                    tensor = self._device_tensor(host, owned, upload=not is_output)
                    tensors.append(tensor)
                    device[arg.name] = owned[-1]
                    args.append(tensor)
                else:
                    args.append(_c_value(arg.kind, arg.value))
            ws_size, executor = ctypes.c_uint64(0), ctypes.c_void_p()
            self._check(entry.get_workspace_size(*args, ctypes.byref(ws_size), ctypes.byref(executor)),
                        f"aclnn{art.op_name}GetWorkspaceSize")
            workspace = ctypes.c_void_p()
            if ws_size.value:
                self._check(self.acl.aclrtMalloc(ctypes.byref(workspace), ws_size.value, 0), "aclrtMalloc")
                owned.append(workspace)
            self._check(entry.launch(workspace, ws_size, executor, stream), f"aclnn{art.op_name}")
            self._check(self.acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
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
