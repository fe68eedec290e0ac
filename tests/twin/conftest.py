"""Fixtures for the twin tests: one TwinBackend per session whose kernels are compiled up front,
all at once and in parallel (g++ processes), so the tests share them through the cache. Every
ApplyProximalGradientDescent variant is one operator project per target (twin_cases.prox_projects),
compiled whole, which serves each of its variants.

Random data comes from the `seed` fixture of tests/conftest.py (stable per test; `--seed N`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # twin_cases.py sits beside the tests

from twin_cases import cases, model_of, prox_projects

from codegen.api import build_kernels
from codegen.targets import TARGETS
from lowering import fuse
from runtime.backends.cpu import CpuBackend

MODELS = sorted((Path(__file__).resolve().parents[2] / "models").glob("*.onnx"))
HAVE_CXX = shutil.which(os.environ.get("ASCEND_TWIN_CXX") or os.environ.get("CXX") or "g++") is not None


@pytest.fixture(scope="session")
def cpu() -> CpuBackend:
    return CpuBackend()


def _artifacts() -> list:
    """Every kernel the variant and model tests launch, on every target."""
    models = [fuse(model_of(v, (256,)))[0] for v in {c[0] for c in cases()}]
    models += [fuse(str(path))[0] for path in MODELS]
    return [art for m in models for target in TARGETS for art in build_kernels(m, target)]


@pytest.fixture(scope="session")
def toolchain():
    """The twin's compiler (tests that compile their own C++ skip without one)."""
    if not HAVE_CXX:
        pytest.skip("no C++ compiler (the twin needs g++)")
    from runtime.twin.toolchain import find_toolchain

    return find_toolchain()


@pytest.fixture(scope="session")
def twin():
    """The twin backend with every tested kernel already compiled."""
    if not HAVE_CXX:
        pytest.skip("no C++ compiler (the twin needs g++)")
    from runtime.backends.twin import TwinBackend

    backend = TwinBackend()
    backend.prepare(_artifacts(), jobs=max(2, os.cpu_count() or 1), projects=prox_projects())
    return backend
