"""Backends by name. `cpu` interprets the kernel IR; `npu` drives a real Ascend device via CANN."""

from __future__ import annotations

from runtime.backend import Backend, BackendError
from runtime.backends.cpu import CpuBackend
from runtime.backends.npu import NpuBackend
from runtime.backends.twin import TwinBackend

BACKENDS: dict[str, type[Backend]] = {
    "cpu": CpuBackend,
    "npu": NpuBackend,
    "twin": TwinBackend,
}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def get_backend(name: str, **options: object) -> Backend:
    """An instance of the backend called `name`; BackendError says why one cannot be had."""
    cls = BACKENDS.get(name)
    if cls is None:
        raise BackendError(f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}")
    return cls(**options)
