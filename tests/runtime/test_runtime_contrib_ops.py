"""lower's own com.microsoft training ops (runtime/contrib_ops.py) against their definitions.

The definitions are onnxruntime-training's CPU kernels (cited in the module); the implementation
was also held to the real kernels bit for bit by models/check_ort_training_ops.py, which needs the
onnxruntime-training package CI does not have. Here: the documented meaning, computed another way
(float64, then compared within one rounding), plus the kernel's own rounding where it differs from
the plain formula, and every refusal.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from runtime.contrib_ops import MS_DOMAIN, ContribOpError, implements, run_contrib


def _scale(down: int) -> object:
    return h.make_node("Scale", ["x", "s"], ["y"], domain=MS_DOMAIN, scale_down=down)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("down", [0, 1])
@pytest.mark.parametrize("xtype,stype", [(np.float32, np.float32), (np.float32, np.int64), (np.float64, np.float64),
                                         (np.float64, np.int32)])
def test_scale_multiplies_or_divides_within_one_rounding(seed, down, xtype, stype):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((5, 6)) * 100).astype(xtype)
    s = np.array(rng.integers(1, 50) if np.dtype(stype).kind == "i" else rng.uniform(0.01, 30), stype)
    y, = run_contrib(_scale(down), [x, s]).outputs
    want = x.astype(np.float64) / float(s) if down else x.astype(np.float64) * float(np.float32(s))
    assert y.dtype == x.dtype and y.shape == x.shape
    # the kernel rounds the scale to float32 and its reciprocal again: a few float32 ulps at most
    np.testing.assert_allclose(y, want, rtol=4 * np.finfo(np.float32).eps, err_msg=f"seed {seed}")


def test_scale_down_multiplies_by_the_float32_reciprocal_as_the_kernel_does():
    x = np.arange(1, 201, dtype=np.float32) * np.float32(1.37)
    y, = run_contrib(_scale(1), [x, np.array(7, np.int64)]).outputs
    reciprocal = np.float32(1) / np.float32(7)
    assert np.array_equal(y, x * reciprocal)
    assert not np.array_equal(y, x / np.float32(7))  # the plain division rounds differently somewhere


@pytest.mark.parametrize("x,s,message", [
    (np.ones(3, np.float32), np.array(0.0, np.float32), "scale is 0"),
    (np.ones(3, np.float16), np.array(2.0, np.float32), "float and double"),
    (np.ones(3, np.float32), np.ones(2, np.float32), "holds 2 values"),
    (np.ones(3, np.float32), np.array(2, np.int8), "scale is int8"),
])
def test_scale_refuses_what_the_kernel_refuses(x, s, message):
    with pytest.raises(ContribOpError, match=message):
        run_contrib(_scale(0), [x, s])


def _accumulator(with_flag: bool, second_output: bool) -> object:
    inputs = ["b", "v", "o"] if with_flag else ["b", "v"]
    outputs = ["done", "out"] if second_output else ["done"]
    return h.make_node("InPlaceAccumulatorV2", inputs, outputs, domain=MS_DOMAIN)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("flag", [None, False, True])
def test_accumulator_adds_or_overwrites_in_place(seed, flag):
    rng = np.random.default_rng(seed)
    buffer = rng.standard_normal((4, 5)).astype(np.float32)
    value = rng.standard_normal((4, 5)).astype(np.float32)
    node = _accumulator(flag is not None, second_output=True)
    inputs = [buffer, value] + ([] if flag is None else [np.array([flag])])
    result = run_contrib(node, inputs)
    want = value if flag else (buffer.astype(np.float64) + value).astype(np.float32)
    assert np.array_equal(result.updates[0], want), f"seed {seed}"
    done, out = result.outputs
    assert done.dtype == np.bool_ and done.shape == (1,) and done.all()
    assert np.array_equal(out, want)
    assert np.array_equal(inputs[0], buffer)  # the caller's array is not changed


def test_accumulator_broadcasts_the_value_and_leaves_an_unnamed_output_out():
    buffer = np.zeros((3, 4), np.float32)
    row = np.arange(4, dtype=np.float32)
    result = run_contrib(_accumulator(False, second_output=False), [buffer, row])
    assert np.array_equal(result.updates[0], np.tile(row, (3, 1)))
    assert len(result.outputs) == 1


@pytest.mark.parametrize("buffer,value,message", [
    (np.zeros(3, np.float64), np.zeros(3, np.float64), "takes float"),
    (np.zeros(3, np.float32), np.zeros(4, np.float32), "do not broadcast"),
    (np.zeros(3, np.float32), np.zeros((2, 3), np.float32), "cannot hold"),
])
def test_accumulator_refuses_what_the_kernel_refuses(buffer, value, message):
    with pytest.raises(ContribOpError, match=message):
        run_contrib(_accumulator(False, second_output=False), [buffer, value])


def test_only_the_documented_ops_are_implemented():
    assert implements(_scale(0)) and implements(_accumulator(True, False))
    assert not implements(h.make_node("InPlaceAccumulator", ["b", "v"], ["s"], domain=MS_DOMAIN))
    assert not implements(h.make_node("Scale", ["x"], ["y"], domain=""))
