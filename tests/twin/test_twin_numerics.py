"""The twin's casts against the CPU backend's (runtime/numerics.py), pattern by pattern.

float16 -> float32 and bfloat16 -> float32 on all 65536 bit patterns; float32 -> float16 and
float32 -> bfloat16 on every upper half-word with the lower half-words that sit on, just below
and just above each rounding boundary (ties to even, carries into the exponent, overflow to inf,
subnormal results), plus random ones. The vector instructions' numerics are covered by the
variant tests; the casts are where a bit-level implementation can go wrong.
"""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from twin_cases import differing

from codegen.targets import TARGETS
from runtime.numerics import cast
from runtime.twin.build import build
from runtime.twin.library import GM_INPUT, GM_OUTPUT, GmArg, TargetRules, TwinLibrary
from runtime.twin.sources import snippet_sources

SOURCE = Path(__file__).with_name("twin_cast_cases.h").read_text()
MODES = {"F32_TO_F16": 0, "F32_TO_BF16": 1, "F16_TO_F32": 2, "BF16_TO_F32": 3}
LOW_HALFWORDS = (0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF)


@pytest.fixture(scope="module")
def casts(toolchain) -> TwinLibrary:
    return TwinLibrary(build(snippet_sources(SOURCE, "cast_cases", 2, "CastTiling"), toolchain, "cast_cases"),
                       "cast_cases")


def run_cast(lib: TwinLibrary, mode: str, x: np.ndarray, out_dtype) -> np.ndarray:
    y = np.empty(x.size, out_dtype)
    t = TARGETS["ascend950"]
    lib.launch([GmArg("x", x, GM_INPUT), GmArg("y", y, GM_OUTPUT)], struct.pack("<ii", MODES[mode], x.size), 0, 1,
               0, TargetRules(t.ub_bytes, t.select_scratch_bytes, t.npu_arch))
    return y


def float32_patterns(seed: int) -> np.ndarray:
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array(LOW_HALFWORDS, np.uint32)
    rand = np.random.default_rng(seed).integers(0, 1 << 16, high.size, dtype=np.uint32)
    bits = np.concatenate([(high[:, None] | lows[None, :]).reshape(-1), high | rand])
    return bits.view(np.float32)


@pytest.mark.parametrize(("mode", "src", "dst"), [("F16_TO_F32", np.float16, "float32"),
                                                  ("BF16_TO_F32", ml_dtypes.bfloat16, "float32")])
def test_widening_casts_are_exact_on_every_pattern(casts, mode, src, dst):
    x = np.arange(1 << 16, dtype=np.uint16).view(src)
    got = run_cast(casts, mode, x, np.float32)
    assert differing(got, cast(x, dst)).size == 0


@pytest.mark.parametrize(("mode", "dst"), [("F32_TO_F16", "float16"), ("F32_TO_BF16", "bfloat16")])
def test_narrowing_casts_round_half_even_on_every_boundary(casts, mode, dst, seed):
    x = float32_patterns(seed)
    got = run_cast(casts, mode, x, np.float16 if dst == "float16" else ml_dtypes.bfloat16)
    with np.errstate(over="ignore", invalid="ignore"):
        want = cast(x, dst)
    bad = differing(got, want)
    assert bad.size == 0, f"seed {seed}: first inputs that differ {x.view(np.uint32)[bad[:5]]}"
    nan = np.isnan(x)
    assert np.array_equal(np.signbit(got[nan].astype(np.float32)), np.signbit(x[nan])), "NaN keeps its sign"
