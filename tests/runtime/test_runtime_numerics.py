"""AscendC numerics of the CPU backend and the precision metrics of the diff."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from runtime import numerics
from runtime.precision import THRESHOLDS, compare

BF16 = ml_dtypes.bfloat16


def test_cast_out_rounds_half_to_even_and_overflows_to_inf():
    # 1 + 2^-11 is halfway between float16 neighbours 1 and 1 + 2^-10: ties go to the even one
    x = np.array([[1 + 2**-11, 1 + 3 * 2**-11, 65520.0, -1e6, np.nan, -0.0]], np.float32)
    got = numerics.cast(x, "float16")
    assert got.dtype == np.float16
    assert got[0, 0] == 1.0 and got[0, 1] == np.float16(1 + 2**-9)
    assert np.isposinf(got[0, 2]) and np.isneginf(got[0, 3]) and np.isnan(got[0, 4])
    assert np.signbit(got[0, 5])


def test_cast_out_bfloat16_round_half_even():
    x = np.array([[1 + 2**-8, 1 + 3 * 2**-8, 3.4e38]], np.float32)
    got = numerics.cast(x, "bfloat16")
    assert got.dtype == BF16
    assert float(got[0, 0]) == 1.0 and float(got[0, 1]) == 1 + 2**-6
    assert np.isinf(float(got[0, 2]))


def test_cast_in_is_exact_and_same_dtype_cast_is_refused():
    every_half = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(1, -1)
    got = numerics.cast(every_half, "float32")
    with np.errstate(invalid="ignore"):  # NaN payloads through float64
        want = every_half.astype(np.float64).astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    with pytest.raises(ValueError):
        numerics.cast(np.zeros((1, 64), np.float32), "float32")


def test_sign_maps_zero_and_nan_to_zero():
    x = np.array([[-np.inf, -2, -0.0, 0.0, np.nan, 2, np.inf]], np.float32)
    got = numerics.sign(x)
    assert got.tolist() == [[-1, -1, 0, 0, 0, 1, 1]]
    assert not np.signbit(got[0, 2:5]).any()  # +0, never -0


def test_compare_packs_bits_little_endian_and_nan_compares_false():
    a = np.arange(64, dtype=np.float32).reshape(1, 64)
    a[0, 5] = np.nan
    mask = numerics.compare(a, np.float32(3), "LT")
    assert mask.shape == (1, 8) and mask.dtype == np.uint8
    assert mask[0, 0] == 0b00000111 and not mask[0, 1:].any()
    ne = numerics.compare(a, a, "NE")
    assert ne[0, 0] == 0b00100000  # only the NaN lane differs from itself


def test_compare_needs_whole_256_byte_repeats():
    with pytest.raises(ValueError, match="256-byte"):
        numerics.compare(np.zeros((1, 32), np.float32), np.float32(0), "GE")


def test_select_tensor_tensor_and_tensor_scalar():
    a = np.arange(64, dtype=np.float32).reshape(1, 64)
    mask = numerics.compare(a, np.float32(10), "GE")
    got = numerics.select(mask, a, np.float32(-1))
    assert got[0, :10].tolist() == [-1] * 10 and got[0, 10:].tolist() == a[0, 10:].tolist()
    got2 = numerics.select(mask, a, -a)
    assert got2[0, 3] == -3 and got2[0, 12] == 12


@pytest.mark.parametrize("policy,expect", [("propagate", True), ("scalar", False)])
def test_maxs_mins_nan_policies(policy, expect):
    x = np.array([[np.nan, -1, 2]], np.float32)
    maxs, mins = numerics.clamp_op("Maxs", policy), numerics.clamp_op("Mins", policy)
    assert np.isnan(maxs(x, np.float32(0))[0, 0]) == expect
    assert np.isnan(mins(x, np.float32(0))[0, 0]) == expect
    assert maxs(x, np.float32(0))[0, 1:].tolist() == [0, 2]


def test_precision_pass_fail_thresholds():
    g = np.linspace(1, 2, 1000).astype(np.float32)
    assert compare("x", g, g).passed
    t = THRESHOLDS["float32"]
    off = (g * (1 + 0.5 * t)).astype(np.float32)
    assert compare("x", off, g).passed
    far = (g * (1 + 2 * t)).astype(np.float32)
    res = compare("x", far, g)
    assert not res.passed and "MERE" in res.note


def test_precision_one_outlier_fails_mare_only():
    g = np.ones(10000, np.float16)
    a = g.copy()
    a[7] = np.float16(1.25)
    res = compare("y", a, g)
    assert res.mere < THRESHOLDS["float16"] and res.mare >= 10 * THRESHOLDS["float16"]
    assert not res.passed and "MARE" in res.note


def test_precision_names_a_subnormal_tie_but_keeps_the_verdict():
    # a float16 mean over a million elements: kernel and onnxruntime round one value to either side
    g = np.full(1000, 3.576e-06, np.float16)
    a = g.copy()
    a[3] = np.nextafter(g[3], np.float16(1))
    res = compare("g", a, g)
    assert not res.passed and "rounding tie" in res.note
    a[5] = np.float16(1e-4)  # a real error beside the tie: no excuse offered
    res = compare("g", a, g)
    assert not res.passed and "MARE" in res.note and "tie" not in res.note


def test_precision_nan_and_inf_positions():
    g = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    assert compare("z", g.copy(), g).passed
    res = compare("z", np.array([1.0, 0.0, np.inf, np.inf], np.float32), g)
    assert res.nan_mismatch == 1 and res.inf_mismatch == 1 and not res.passed


def test_precision_shape_and_exact_types():
    assert not compare("s", np.zeros(3), np.zeros(4)).passed
    assert compare("i", np.arange(4), np.arange(4)).passed
    assert not compare("i", np.arange(4), np.arange(4)[::-1].copy()).passed
    assert compare("e", np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)).passed


def test_fast_float16_cast_is_bit_identical_to_numpy():
    """The subnormal fast path must round exactly like numpy's conversion (RNE, signed zeros)."""
    rng = np.random.default_rng(2)
    random_bits = rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    tiny = (rng.random(1 << 18) * 2.0**-13).astype(np.float32) * rng.choice([-1, 1], 1 << 18).astype(np.float32)
    ties = np.array([2**-25, 3 * 2**-25, 1023.5 * 2**-24, 1022.5 * 2**-24, 2**-14 * (1 - 2**-12),
                     1e-45, -1e-45, -0.0, 0.0, np.nan, 65519.99, 65520.0], np.float32)
    for x in (random_bits, tiny, ties):
        with np.errstate(all="ignore"):
            want = x.astype(np.float16)
        got = numerics.cast(x.reshape(-1, 2) if x.size % 2 == 0 else x.reshape(1, -1), "float16").reshape(-1)
        same = (want.view(np.uint16) == got.view(np.uint16)) | (np.isnan(want) & np.isnan(got))
        assert same.all()
