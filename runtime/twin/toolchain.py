"""The C++ compiler the twin uses, its flags, and where compiled kernels are cached.

Environment: ASCEND_TWIN_CXX (default: $CXX, else g++), ASCEND_TWIN_CACHE (default
$XDG_CACHE_HOME/ascend-lowering/twin or ~/.cache/ascend-lowering/twin).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from runtime.backend import BackendError

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
# IEEE float32 exactly as written: no contraction into FMA and (the default) no fast-math.
# -fno-trapping-math only lets the compiler compute both sides of a select (no FP trap is ever
# enabled, so results are the same), which the branch-free casts need to vectorise.
CXX_FLAGS = ("-std=c++17", "-O2", "-fvect-cost-model=dynamic", "-fno-trapping-math", "-ffp-contract=off", "-fPIC",
             "-shared", "-fvisibility=hidden", "-w")


@dataclass(frozen=True)
class Toolchain:
    cxx: str
    version: str  # first line of `cxx --version`: part of the cache key
    flags: tuple[str, ...] = CXX_FLAGS


def _cpu_flags() -> tuple[str, ...]:
    """-mavx2 where this x86 CPU has it (8-lane loops; IEEE results are the same, there is no FMA).

    The flag is part of the cache key, so a shared cache never hands an AVX2 build to a CPU
    without AVX2.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return ("-mavx2",) if " avx2" in line else ()
    except OSError:
        pass
    return ()


@lru_cache(maxsize=4)
def _probe(cxx: str) -> Toolchain:
    path = shutil.which(cxx)
    if path is None:
        raise BackendError(f"twin backend: no C++ compiler {cxx!r} on PATH; install g++ or set ASCEND_TWIN_CXX")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendError(f"twin backend: {path} --version failed: {exc}") from None
    return Toolchain(path, (out.splitlines() or [""])[0], CXX_FLAGS + _cpu_flags())


def find_toolchain() -> Toolchain:
    """The compiler named by ASCEND_TWIN_CXX or CXX (default g++); BackendError if missing."""
    return _probe(os.environ.get("ASCEND_TWIN_CXX") or os.environ.get("CXX") or "g++")


def cache_dir() -> Path:
    """A writable directory for compiled kernels (created on first use)."""
    configured = os.environ.get("ASCEND_TWIN_CACHE")
    if configured:
        root = Path(configured)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        root = base / "ascend-lowering" / "twin"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            return root
    except OSError:
        if configured:
            raise BackendError(f"twin backend: ASCEND_TWIN_CACHE={configured} is not a writable directory") from None
    fallback = Path(tempfile.gettempdir()) / f"ascend-lowering-twin-{os.getuid()}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback
