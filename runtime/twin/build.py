"""Compile a twin build (a dict of relative path -> source text) into a cached shared object.

The cache key is a SHA-256 over the compiler, its flags, every header of include/ and every
source, so a change to any of them recompiles and nothing else does. A build is staged in a
temporary directory of the cache and renamed into place, so concurrent builds (threads or
processes) of the same key are safe; the sources stay beside kernel.so for debugging.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from runtime.twin.errors import TwinCompileError
from runtime.twin.sources import LAUNCHER
from runtime.twin.toolchain import INCLUDE_DIR, Toolchain, cache_dir

LIBRARY = "kernel.so"
COMPILE_TIMEOUT_S = 600
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@lru_cache(maxsize=1)
def _header_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*.h")):
        h.update(path.relative_to(INCLUDE_DIR).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_key(sources: Mapping[str, str], tc: Toolchain) -> str:
    h = hashlib.sha256()
    for part in (tc.cxx, tc.version, *tc.flags, _header_digest()):
        h.update(part.encode() + b"\0")
    for rel in sorted(sources):
        h.update(rel.encode() + b"\0" + sources[rel].encode() + b"\0")
    return h.hexdigest()


def _first_error(stderr: str, stage: Path) -> str:
    lines = [ln.replace(str(stage) + os.sep, "") for ln in stderr.splitlines()]
    for ln in lines:
        if "error" in ln:
            return ln.strip()
    return next((ln.strip() for ln in lines if ln.strip()), "the compiler failed without a message")


def _compile(sources: Mapping[str, str], tc: Toolchain, final: Path, label: str) -> None:
    stage = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        for rel, text in sources.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        cmd = [tc.cxx, *tc.flags, "-I", str(INCLUDE_DIR), "-I", str(stage), "-o", LIBRARY, LAUNCHER]
        try:
            proc = subprocess.run(cmd, cwd=stage, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise TwinCompileError(f"twin: compiling {label} took over {COMPILE_TIMEOUT_S} s") from None
        except OSError as exc:
            raise TwinCompileError(f"twin: cannot run {tc.cxx}: {exc.strerror or exc}") from None
        if proc.returncode != 0:
            raise TwinCompileError(f"twin: {label} does not compile against the twin headers: "
                                   f"{_first_error(proc.stderr, stage)}")
        try:
            os.rename(stage, final)
        except OSError:
            if not (final / LIBRARY).is_file():  # another process won the race, or a real failure
                raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def build(sources: Mapping[str, str], tc: Toolchain, label: str) -> Path:
    """Path of the shared object for `sources`, compiling it only when the cache lacks it."""
    key = build_key(sources, tc)
    final = cache_dir() / key[:2] / key
    library = final / LIBRARY
    if library.is_file():
        return library
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if not library.is_file():
            if final.exists():  # a directory left without its library: rebuild it
                shutil.rmtree(final, ignore_errors=True)
            final.parent.mkdir(parents=True, exist_ok=True)
            _compile(sources, tc, final, label)
    return library
