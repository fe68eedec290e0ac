"""The ctypes side of one compiled twin kernel (the C ABI of include/twin/launch.h).

ctypes releases the GIL during each call, so disjoint block ranges of one launch run on
several threads at once, as the AI cores would.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.backend import BackendError
from runtime.twin.errors import TwinRuleError

ABI_VERSION = 2
HostAttr = float | str | bool
_ATTR_KINDS = {float: 0, str: 1, bool: 2}  # gert::RuntimeAttrs::Kind of the twin header
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_guard = threading.Lock()
GM_INPUT, GM_OUTPUT, GM_WORKSPACE, GM_TILING = 0, 1, 2, 3
_TEXT = 512
_TILING_CAPACITY = 4096
_P = ctypes.c_void_p
_U32, _U64, _I32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32


@dataclass(frozen=True)
class HostTiling:
    """What the emitted tiling function decided: tiling data bytes, block dim, key, workspace."""

    data: bytes
    block_dim: int
    tiling_key: int
    workspace: int


@dataclass(frozen=True)
class GmArg:
    """One GM buffer of a launch: a kernel parameter (input or output) by name."""

    name: str
    array: np.ndarray  # C-contiguous; outputs are written in place
    kind: int  # GM_INPUT or GM_OUTPUT


@dataclass(frozen=True)
class TargetRules:
    """The target facts the kernel-side rules need."""

    ub_bytes: int
    select_reserve: int
    npu_arch: int


@dataclass(frozen=True)
class LaunchStats:
    gm_read_bytes: int
    gm_write_bytes: int


def _pool(workers: int) -> ThreadPoolExecutor:
    """A long-lived pool per size: threads (and the UB arena each keeps) outlive one launch."""
    with _pools_guard:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="twin-block")
        return _pools[workers]


class TwinLibrary:
    """One loaded kernel library; `label` names it in errors."""

    def __init__(self, path: Path, label: str) -> None:
        self.label = label
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise BackendError(f"twin: cannot load {path}: {exc}") from None
        self._bind(lib)
        if lib.twin_abi_version() != ABI_VERSION:
            raise BackendError(f"twin: {path} was built for another launcher ABI; clear the twin cache")
        self._lib = lib
        self.gm_count = int(lib.twin_gm_count())
        self.tiling_size = int(lib.twin_tiling_size())

    @staticmethod
    def _bind(lib: ctypes.CDLL) -> None:
        lib.twin_abi_version.restype = ctypes.c_int
        lib.twin_gm_count.restype = _U32
        lib.twin_tiling_size.restype = _U64
        lib.twin_host_tiling.restype = ctypes.c_int
        lib.twin_host_tiling.argtypes = [_P, _P, _P, _I32, _P, _P, _P, _I32, _U32, _U64, _P, _U64, _P, _P, _P, _P,
                                         ctypes.c_char_p, _U64]
        lib.twin_launch_new.restype = _P
        lib.twin_launch_new.argtypes = [_P, _P, _P, _P, _P, _U32, _U64, _U32, _U64, _U64, _U32]
        lib.twin_run_blocks.restype = ctypes.c_int
        lib.twin_run_blocks.argtypes = [_P, _U32, _U32]
        lib.twin_launch_finish.restype = ctypes.c_int
        lib.twin_launch_finish.argtypes = [_P, _P, ctypes.c_char_p, ctypes.c_char_p, _U64, _P]
        lib.twin_launch_free.restype = None
        lib.twin_launch_free.argtypes = [_P]

    def host_tiling(self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[int], attrs: Sequence[HostAttr],
                    cores: int, ub_bytes: int) -> HostTiling:
        """Run the emitted tiling function for inputs of `shapes` and ge `dtypes`, the call's
        attributes in OpDef order, on a target's cores and UB."""
        dims = (ctypes.c_int64 * max(1, sum(len(s) for s in shapes)))(*[d for s in shapes for d in s])
        ranks = (_I32 * max(1, len(shapes)))(*[len(s) for s in shapes])
        ge_dtypes = (_I32 * max(1, len(dtypes)))(*dtypes)
        n_attrs = len(attrs)
        kinds = (ctypes.c_uint8 * max(1, n_attrs))(*[_ATTR_KINDS[type(a)] for a in attrs])
        floats = (ctypes.c_float * max(1, n_attrs))(*[0.0 if isinstance(a, str) else float(a) for a in attrs])
        strs = (ctypes.c_char_p * max(1, n_attrs))(*[a.encode() if isinstance(a, str) else b"" for a in attrs])
        out = (ctypes.c_uint8 * _TILING_CAPACITY)()
        size, block_dim, key, workspace = _U64(), _U32(), _U64(), _U64()
        msg = ctypes.create_string_buffer(_TEXT)
        rc = self._lib.twin_host_tiling(dims, ranks, ge_dtypes, len(shapes), kinds, floats, strs, n_attrs, cores,
                                        ub_bytes, out, _TILING_CAPACITY,
                                        ctypes.byref(size), ctypes.byref(block_dim), ctypes.byref(key),
                                        ctypes.byref(workspace), msg, _TEXT)
        if rc != 0:
            raise BackendError(f"twin: host tiling of {self.label} failed: {msg.value.decode(errors='replace')}")
        return HostTiling(bytes(out[: size.value]), block_dim.value, key.value, workspace.value)

    def launch(self, args: Sequence[GmArg], tiling: bytes, tiling_key: int, block_dim: int, workspace: int,
               rules: TargetRules, workers: int = 1) -> LaunchStats:
        """Run every block; raise TwinRuleError for the first rule broken (lowest block)."""
        if len(args) != self.gm_count:
            raise BackendError(f"twin: {self.label} takes {self.gm_count} GM buffers, got {len(args)}")
        ws = np.zeros(max(workspace, 1), np.uint8)
        tiling_buf = np.frombuffer(bytearray(tiling) or bytearray(1), np.uint8)
        regions = [(a.array, a.array.nbytes, a.array.itemsize, a.kind, a.name) for a in args]
        regions += [(ws, workspace, 1, GM_WORKSPACE, "workspace"), (tiling_buf, len(tiling), 1, GM_TILING, "tiling")]
        n = len(regions)
        bases = (_P * n)(*[r[0].ctypes.data for r in regions])
        sizes = (_U64 * n)(*[r[1] for r in regions])
        elems = (_U32 * n)(*[r[2] for r in regions])
        kinds = (ctypes.c_uint8 * n)(*[r[3] for r in regions])
        names = (ctypes.c_char_p * n)(*[r[4].encode() for r in regions])
        handle = self._lib.twin_launch_new(bases, sizes, elems, kinds, names, n, tiling_key, block_dim,
                                           rules.ub_bytes, rules.select_reserve, rules.npu_arch)
        if not handle:
            raise BackendError(f"twin: out of memory launching {self.label}")
        try:
            self._run(handle, block_dim, workers)
            stats = (_U64 * 2)()
            rule, msg, block = ctypes.create_string_buffer(_TEXT), ctypes.create_string_buffer(_TEXT), _I32()
            if self._lib.twin_launch_finish(handle, stats, rule, msg, _TEXT, ctypes.byref(block)) != 0:
                raise TwinRuleError(self.label, rule.value.decode(errors="replace"),
                                    msg.value.decode(errors="replace"), block.value)
            return LaunchStats(int(stats[0]), int(stats[1]))
        finally:
            self._lib.twin_launch_free(handle)

    def _run(self, handle: int, block_dim: int, workers: int) -> None:
        workers = max(1, min(workers, block_dim))
        cuts = [block_dim * k // workers for k in range(workers + 1)]
        if workers == 1:
            codes = [self._lib.twin_run_blocks(handle, 0, block_dim)]
        else:
            pool = _pool(workers)
            futures = [pool.submit(self._lib.twin_run_blocks, handle, cuts[k], cuts[k + 1]) for k in range(workers)]
            codes = [f.result() for f in futures]
        if any(c < 0 for c in codes):  # rule errors are read by twin_launch_finish
            raise BackendError(f"twin: {self.label} was launched with a GM argument list it cannot take")
