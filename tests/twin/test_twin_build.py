"""Building and caching twin kernels, compile errors, backend options and GM traffic accounting."""

from __future__ import annotations

import subprocess
import threading

import numpy as np
import pytest
from twin_cases import Variant, differing, feeds_of, model_of

from codegen.api import build_kernels
from lowering import fuse
from runtime.backend import BackendError
from runtime.backends import get_backend
from runtime.twin import toolchain as toolchain_mod
from runtime.twin.build import build, build_key
from runtime.twin.errors import TwinCompileError
from runtime.twin.sources import snippet_sources

TINY = """
#include "kernel_operator.h"
using namespace AscendC;
struct TinyTiling { int32_t n; };
extern "C" __global__ __aicore__ void tiny(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)
{
    GET_TILING_DATA_WITH_STRUCT(TinyTiling, t, tiling);
    if (TILING_KEY_IS(0)) {
        GlobalTensor<float> xGm;
        xGm.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), t.n);
    }
}
"""

HALF_ARITHMETIC = TINY.replace("xGm.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), t.n);",
                               "LocalTensor<half> h;\n        Add(h, h, h, 64);")


def tiny_sources(text: str = TINY) -> dict[str, str]:
    return snippet_sources(text, "tiny", 1, "TinyTiling")


def test_a_cached_kernel_is_reused_without_running_the_compiler(toolchain, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TWIN_CACHE", str(tmp_path))
    first = build(tiny_sources(), toolchain, "tiny")
    assert tmp_path in first.parents and first.is_file()
    assert (first.parent / "twin_launch.cpp").is_file(), "the sources stay beside the library"

    def no_compiler(*args, **kwargs):
        raise AssertionError("recompiled a cached kernel")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert build(tiny_sources(), toolchain, "tiny") == first


def test_concurrent_builds_of_one_kernel_compile_it_once(toolchain, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TWIN_CACHE", str(tmp_path))
    calls = []
    real_run = subprocess.run

    def counting_run(cmd, *args, **kwargs):
        calls.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(build(tiny_sources(), toolchain, "tiny")))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(paths)) == 1


def test_the_key_covers_sources_and_flags(toolchain):
    base = build_key(tiny_sources(), toolchain)
    assert build_key(tiny_sources(TINY + "\n// changed\n"), toolchain) != base
    flags = toolchain_mod.Toolchain(toolchain.cxx, toolchain.version, toolchain.flags + ("-DX",))
    assert build_key(tiny_sources(), flags) != base
    assert build_key(tiny_sources(), toolchain) == base


def test_a_compile_error_is_one_line_naming_the_first_error(toolchain, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TWIN_CACHE", str(tmp_path))
    with pytest.raises(TwinCompileError) as err:
        build(tiny_sources(HALF_ARITHMETIC), toolchain, "tiny")
    text = str(err.value)
    assert "\n" not in text and "error" in text
    assert "the twin implements vector arithmetic on float only" in text
    assert str(tmp_path) not in text, "paths are shown relative to the build"


def test_a_missing_compiler_is_a_backend_error(monkeypatch):
    monkeypatch.setenv("ASCEND_TWIN_CXX", "no-such-compiler-xyz")
    with pytest.raises(BackendError, match="no C\\+\\+ compiler 'no-such-compiler-xyz'"):
        get_backend("twin")


def test_an_unusable_cache_setting_is_a_backend_error(toolchain, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ASCEND_TWIN_CACHE", str(blocker / "cache"))
    with pytest.raises(BackendError, match="ASCEND_TWIN_CACHE"):
        build(tiny_sources(), toolchain, "tiny")


def test_backend_options_are_checked(toolchain):
    with pytest.raises(BackendError, match="workers"):
        get_backend("twin", workers=0)


def test_blocks_on_several_threads_give_the_same_result_and_traffic(twin, seed):
    v = Variant("sl1", "float32", "mean", True, 0.5)
    art = build_kernels(fuse(model_of(v, (256,)))[0], "ascend910b")[0]
    kernel = twin.kernel(art)
    n = 300_001
    feeds = feeds_of(v, (n,), np.random.default_rng(seed))
    inputs = {k: np.asarray(a).reshape(-1) for k, a in feeds.items()}
    tiling = kernel.host_tiling(inputs)
    one, stats1 = kernel.run(inputs, tiling, workers=1)
    many, stats3 = kernel.run(inputs, tiling, workers=3)
    assert differing(one["gradient"], many["gradient"]).size == 0
    assert stats1 == stats3
    # each input element read once, the one-element dout once per core, each output written once
    assert stats1.gm_read_bytes == 2 * 4 * n + 4 * tiling.block_dim
    assert stats1.gm_write_bytes == 4 * n
