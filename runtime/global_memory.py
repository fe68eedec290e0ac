"""Global memory of one interpreted launch: the kernel's GM buffers by name, every access checked.

The twin (runtime/twin/include/twin/tensor.h) checks each GM access of the compiled kernel
against the buffer it goes through; the IR interpreter reads and writes through this class so
that it fails on the same accesses with the same kind of message (rule `gm-bounds`): a read or
write of bytes outside the buffer, never a silently shortened numpy slice, a wrapped-around
negative index or an IndexError. On the device such an access reads another buffer or faults.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from contracts.errors import InternalError


class GmAccessError(InternalError, RuntimeError):
    """A kernel access outside its GM buffer (the twin's rule gm-bounds)."""


class GlobalMemory:
    """Flat GM buffers by name; inputs are read-only, outputs written through `store`."""

    def __init__(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        self._inputs = {name: np.asarray(a).reshape(-1) for name, a in inputs.items()}
        self._outputs = {name: a.reshape(-1) for name, a in outputs.items()}

    def _check(self, api: str, name: str, buf: np.ndarray, first: int, end: int, write: bool) -> None:
        """Elements [first, end) of `buf` (a read or write by `api`) lie inside it."""
        if first < 0 or end > buf.size:
            size = buf.itemsize
            raise GmAccessError(
                f"rule gm-bounds: {api} {'writes' if write else 'reads'} {(end - first) * size} bytes at offset "
                f"{first * size} of GM buffer {name}, which holds {buf.nbytes} bytes")

    def load(self, api: str, name: str, start: int, count: int) -> np.ndarray:
        """Elements [start, start + count) of input `name` (a view)."""
        buf = self._inputs[name]
        self._check(api, name, buf, start, start + count, False)
        return buf[start:start + count]

    def gather(self, api: str, name: str, index: np.ndarray) -> np.ndarray:
        """The elements of input `name` at `index` (any shape), each read checked."""
        buf = self._inputs[name]
        if index.size:
            low, high = int(index.min()), int(index.max())
            if low < 0:
                self._check(api, name, buf, low, low + 1, False)
            self._check(api, name, buf, high, high + 1, False)
        return buf[index]

    def value(self, api: str, name: str) -> np.ndarray:
        """Element 0 of input `name`, as GetValue(0) reads a scalar."""
        return self.load(api, name, 0, 1)[0]

    def store(self, api: str, name: str, start: int, count: int) -> np.ndarray:
        """A writable view of elements [start, start + count) of output `name`."""
        buf = self._outputs[name]
        self._check(api, name, buf, start, start + count, True)
        return buf[start:start + count]
