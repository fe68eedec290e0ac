"""The one ACL runtime of the process: initialised once, released at exit.

CANN allows `aclInit` once per process (a second call returns ACL_ERROR_REPEAT_INITIALIZE) and
wants `aclFinalize` before the process exits. Every npu backend of the process therefore shares
one AclRuntime (`shared_runtime`), each with a stream of its own:

- `aclrtSetDevice` runs once per device; it creates the device's default context and binds it
  to the calling thread only. The runtime keeps that context, and `bind(device)` makes it the
  current context of whichever thread is about to use the device (`aclrtSetCurrentContext`), so
  a backend made in one thread can launch from another (a worker pool, a progress thread).
- At exit (atexit) it releases everything in the order acl_rt.h gives: the streams still open
  (`aclrtDestroyStream`), then each device (`aclrtResetDevice`), then `aclFinalize`.

When something else in the process (a framework's NPU plugin) initialised ACL first, aclInit
returns ACL_ERROR_REPEAT_INITIALIZE: the runtime then uses ACL as it is and, at exit, destroys
only its own streams; resetting the devices and finalizing stays with whoever initialised.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
from collections.abc import Callable

from runtime.backend import BackendError
from runtime.npu.libraries import load_library
from runtime.npu.toolkit import ACL_LIBRARY, NNOP_LIBRARY, Toolkit, find_toolkit

ACL_SUCCESS = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002  # acl_base.h

_VOID_P = ctypes.c_void_p
_PTR = ctypes.POINTER(ctypes.c_void_p)

# acl.h / acl_rt.h (CANN 8.1): function -> argument types; every one returns aclError (int).
ACL_PROTOTYPES: dict[str, list] = {
    "aclInit": [ctypes.c_char_p],
    "aclFinalize": [],
    "aclrtSetDevice": [ctypes.c_int32],
    "aclrtResetDevice": [ctypes.c_int32],
    "aclrtGetCurrentContext": [_PTR],
    "aclrtSetCurrentContext": [_VOID_P],
    "aclrtCreateStream": [_PTR],
    "aclrtDestroyStream": [_VOID_P],
    "aclrtSynchronizeStream": [_VOID_P],
    "aclrtMalloc": [_PTR, ctypes.c_size_t, ctypes.c_int],
    "aclrtFree": [_VOID_P],
    "aclrtMemcpy": [_VOID_P, ctypes.c_size_t, _VOID_P, ctypes.c_size_t, ctypes.c_int],
}


def _declare(acl: ctypes.CDLL, nnop: ctypes.CDLL) -> None:
    for name, argtypes in ACL_PROTOTYPES.items():
        fn = getattr(acl, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    acl.aclGetRecentErrMsg.argtypes, acl.aclGetRecentErrMsg.restype = [], ctypes.c_char_p
    nnop.aclCreateTensor.restype = _VOID_P
    nnop.aclCreateTensor.argtypes = [
        ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
        ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_uint64, _VOID_P]
    nnop.aclDestroyTensor.argtypes, nnop.aclDestroyTensor.restype = [_VOID_P], ctypes.c_int


class AclRuntime:
    """libascendcl and libnnopbase of one toolkit, ACL initialised, the devices and streams in use."""

    def __init__(self, toolkit: Toolkit) -> None:
        self.toolkit = toolkit
        setup = f"source {toolkit.set_env}"
        lib64 = toolkit.library(ACL_LIBRARY).parent
        self.acl = load_library(toolkit.library(ACL_LIBRARY), setup, lib64)
        self.nnop = load_library(toolkit.library(NNOP_LIBRARY), setup, lib64)
        try:
            _declare(self.acl, self.nnop)
        except AttributeError as exc:
            raise BackendError(f"npu backend: the libraries of {toolkit.describe()} lack a function: {exc}") from None
        self._lock = threading.RLock()
        self._contexts: dict[int, ctypes.c_void_p] = {}
        self._streams: dict[int, tuple[int, ctypes.c_void_p]] = {}  # id(stream) -> (device, stream)
        self.finalized = False
        status = self.acl.aclInit(None)
        if status not in (ACL_SUCCESS, ACL_ERROR_REPEAT_INITIALIZE):
            self.check(status, "aclInit")
        self.owns_acl = status == ACL_SUCCESS  # else someone else initialised ACL and finalizes it

    def check(self, status: int, what: str) -> None:
        if status != ACL_SUCCESS:
            msg = (self.acl.aclGetRecentErrMsg() or b"").decode(errors="replace").strip()
            raise BackendError(f"npu backend: {what} returned {status}" + (f": {msg}" if msg else ""))

    def _usable(self) -> None:
        if self.finalized:
            raise BackendError("npu backend: the ACL runtime was released (the process is exiting)")

    def bind(self, device_id: int) -> None:
        """Make `device_id`'s context current in the calling thread (set the device on first use)."""
        with self._lock:
            self._usable()
            context = self._contexts.get(device_id)
            if context is None:
                self.check(self.acl.aclrtSetDevice(device_id), f"aclrtSetDevice({device_id})")
                context = ctypes.c_void_p()
                self.check(self.acl.aclrtGetCurrentContext(ctypes.byref(context)), "aclrtGetCurrentContext")
                self._contexts[device_id] = context
                return
        self.check(self.acl.aclrtSetCurrentContext(context), "aclrtSetCurrentContext")

    def open_stream(self, device_id: int) -> ctypes.c_void_p:
        """A new stream on the device, released by close_stream or at exit."""
        with self._lock:
            self.bind(device_id)
            stream = ctypes.c_void_p()
            self.check(self.acl.aclrtCreateStream(ctypes.byref(stream)), "aclrtCreateStream")
            self._streams[id(stream)] = (device_id, stream)
            return stream

    def close_stream(self, stream: ctypes.c_void_p) -> None:
        with self._lock:
            entry = self._streams.pop(id(stream), None)
            if entry is None or self.finalized:
                return
            self.bind(entry[0])
            self.check(self.acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
            self.check(self.acl.aclrtDestroyStream(stream), "aclrtDestroyStream")

    def release(self) -> list[str]:
        """Destroy the open streams, reset the devices, finalize ACL (when this runtime
        initialised it). Runs at exit; returns the calls that failed (nothing can be raised
        there), and later calls to the runtime raise BackendError."""
        failed: list[str] = []

        def call(status: int, what: str) -> None:
            if status != ACL_SUCCESS:
                failed.append(f"{what} returned {status}")

        with self._lock:
            if self.finalized:
                return failed
            for device_id, stream in list(self._streams.values()):
                call(self.acl.aclrtSetCurrentContext(self._contexts[device_id]), "aclrtSetCurrentContext")
                call(self.acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
                call(self.acl.aclrtDestroyStream(stream), "aclrtDestroyStream")
            self._streams.clear()
            if self.owns_acl:
                for device_id in sorted(self._contexts):
                    call(self.acl.aclrtResetDevice(device_id), f"aclrtResetDevice({device_id})")
                call(self.acl.aclFinalize(), "aclFinalize")
            self._contexts.clear()
            self.finalized = True
        return failed


_shared: AclRuntime | None = None
_shared_lock = threading.Lock()


def shared_runtime(notify: Callable[[str], None]) -> AclRuntime:
    """The process's runtime, made (toolkit found, libraries loaded, aclInit) on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            toolkit = find_toolkit()
            for skipped in toolkit.passed_over:
                notify(f"{skipped} is passed over")
            runtime = AclRuntime(toolkit)
            notify(f"using {toolkit.describe()}"
                   + ("" if runtime.owns_acl else "; ACL was already initialised in this process"))
            atexit.register(_release_at_exit, runtime, notify)
            _shared = runtime
        return _shared


def _release_at_exit(runtime: AclRuntime, notify: Callable[[str], None]) -> None:
    for failure in runtime.release():
        notify(f"at exit: {failure}")
