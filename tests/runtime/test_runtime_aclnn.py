"""The ACL/aclnn shim: checks and status codes case by case, memory, streams, and real launches."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from contracts.fused_ops import proximal_gd_reference, smooth_l1_grad_reference
from runtime import acl, aclnn
from runtime.acl import (
    AclDataType,
    AclFormat,
    AclnnStatus,
    AclrtMemcpyKind,
    tensor_from_numpy,
)
from runtime.aclnn import (
    aclnnApplyProximalGradientDescent,
    aclnnApplyProximalGradientDescentGetWorkspaceSize,
    aclnnAscendLoweringApplyProximalGradientDescent,
    aclnnAscendLoweringApplyProximalGradientDescentGetWorkspaceSize,
    aclnnSmoothL1LossBackward,
    aclnnSmoothL1LossBackwardGetWorkspaceSize,
)
from runtime.precision import compare

SUCCESS, NULLPTR, INVALID = AclnnStatus.SUCCESS, AclnnStatus.PARAM_NULLPTR, AclnnStatus.PARAM_INVALID


def t(shape, dtype=np.float32, fill=None, seed=0):
    rng = np.random.default_rng(seed)
    arr = rng.normal(size=shape) if fill is None else np.full(shape, fill)
    return tensor_from_numpy(np.asarray(arr).astype(dtype))


def sl1(grad_out=..., self=..., target=..., reduction=1, beta=1.0, grad_input=..., shape=(8, 16)):
    args = [t(shape) if a is ... else a for a in (grad_out, self, target)]
    out = t(shape, fill=0) if grad_input is ... else grad_input
    return aclnnSmoothL1LossBackwardGetWorkspaceSize(args[0], args[1], args[2], reduction, beta, out)


def prox(var=..., alpha=..., l1=..., l2=..., delta=..., var_out=..., shape=(100,)):
    vals = {"var": var, "alpha": alpha, "l1": l1, "l2": l2, "delta": delta, "var_out": var_out}
    defaults = {"var": t(shape), "alpha": t((), fill=0.1), "l1": t((1,), fill=0.01),
                "l2": t((), fill=0.2), "delta": t(shape, seed=1), "var_out": t(shape, fill=0)}
    args = [defaults[k] if v is ... else v for k, v in vals.items()]
    return aclnnApplyProximalGradientDescentGetWorkspaceSize(*args)


@pytest.mark.parametrize("which", ["grad_out", "self", "target", "grad_input"])
def test_smooth_l1_null_tensor_is_161001(which):
    status, ws, executor = sl1(**{which: None})
    assert status == NULLPTR and executor is None and ws == 0
    assert "nullptr" in acl.aclGetRecentErrMsg()


@pytest.mark.parametrize("case", [
    {"self": t((8, 16), np.float64)},
    {"grad_out": t((8, 16), np.int32)},
    {"grad_input": t((8, 16), np.float64, fill=0)},
    {"reduction": 3}, {"reduction": -1},
    {"beta": -0.5}, {"beta": float("nan")},
    {"self": t((8, 15))},                                     # fails to broadcast
    {"grad_input": t((8, 1), fill=0)},                       # broadcast != output shape
    {"shape": (1,) * 9},                                      # rank 9
])
def test_smooth_l1_invalid_is_161002(case):
    status, _, executor = sl1(**case)
    assert status == INVALID and executor is None
    assert acl.aclGetRecentErrMsg().startswith("aclnnSmoothL1LossBackward:")


def test_smooth_l1_beta_zero_and_rank_8_are_accepted():
    assert sl1(beta=0.0)[0] == SUCCESS
    assert sl1(shape=(1, 2, 1, 2, 1, 2, 1, 2))[0] == SUCCESS


def test_smooth_l1_empty_input_succeeds_without_launch():
    out = t((0, 16), fill=0)
    status, ws, executor = sl1(self=t((0, 16)), target=t((0, 16)), grad_out=t((0, 16)), grad_input=out)
    assert (status, ws) == (SUCCESS, 0)
    assert executor is not None and executor.call is None
    assert aclnnSmoothL1LossBackward(None, 0, executor, None) == SUCCESS


@pytest.mark.parametrize("which", ["var", "alpha", "l1", "l2", "delta", "var_out"])
def test_prox_null_tensor_is_161001(which):
    status, _, executor = prox(**{which: None})
    assert status == NULLPTR and executor is None


@pytest.mark.parametrize("case", [
    {"var": t((100,), np.float64)},
    {"delta": t((100,), np.float16)},                          # var and delta differ
    {"alpha": t((2,), fill=0.1)},                          # not one element
    {"l2": t((), np.int64, fill=1)},
    {"delta": t((99,))},                                       # no broadcast for var/delta
    {"var_out": t((100, 1), fill=0)},
    {"shape": (1,) * 9},
])
def test_prox_invalid_is_161002(case):
    status, _, executor = prox(**case)
    assert status == INVALID and executor is None


def test_prox_empty_var_succeeds_without_launch():
    status, ws, executor = prox(shape=(0, 4))
    assert (status, ws) == (SUCCESS, 0) and executor.call is None


def test_smooth_l1_launch_on_stream_matches_formula():
    rng = np.random.default_rng(5)
    p, lab, d = (rng.normal(size=(8, 300)).astype(np.float16) for _ in range(3))
    out = tensor_from_numpy(np.zeros((8, 300), np.float16))
    status, ws, executor = aclnnSmoothL1LossBackwardGetWorkspaceSize(
        tensor_from_numpy(d), tensor_from_numpy(p), tensor_from_numpy(lab), 1, 0.5, out)
    assert status == SUCCESS
    _, stream = acl.aclrtCreateStream()
    assert aclnnSmoothL1LossBackward(None, ws, executor, stream) == SUCCESS
    assert not acl.tensor_to_numpy(out).any()  # nothing runs before the stream is synchronized
    assert acl.aclrtSynchronizeStream(stream) == SUCCESS
    golden = smooth_l1_grad_reference(p, lab, d, 0.5, "mean").astype(np.float16)
    assert compare("out", acl.tensor_to_numpy(out), golden).passed
    # executors are single use
    assert aclnnSmoothL1LossBackward(None, ws, executor, stream) == INVALID
    assert aclnnSmoothL1LossBackward(None, 0, None, stream) == NULLPTR


def test_smooth_l1_promotes_broadcasts_and_keeps_the_mean_norm_of_self():
    rng = np.random.default_rng(6)
    p = rng.normal(size=(1, 64)).astype(np.float16)
    lab = rng.normal(size=(5, 64)).astype(ml_dtypes.bfloat16)   # float16 + bfloat16 -> float32
    d = np.array([1.5], np.float32)
    out = tensor_from_numpy(np.zeros((5, 64), np.float32))
    status, ws, executor = aclnnSmoothL1LossBackwardGetWorkspaceSize(
        tensor_from_numpy(d), tensor_from_numpy(p), tensor_from_numpy(lab), 1, 1.0, out)
    assert status == SUCCESS
    assert aclnnSmoothL1LossBackward(None, ws, executor, None) == SUCCESS
    x = np.broadcast_to(p.astype(np.float64), (5, 64)) - lab.astype(np.float64)
    s = np.where(np.abs(x) < 1.0, x, np.sign(x))
    golden = (1.5 * s / p.size).astype(np.float32)  # norm = 1/numel(self), as aclnn computes it
    assert compare("out", acl.tensor_to_numpy(out), golden).passed


def test_cann_prototype_refuses_bfloat16_and_float32_scalars_beside_float16():
    """CANN's ApplyProximalGradientDescent registers float and float16, every input of one dtype."""
    var = np.zeros((3, 4), ml_dtypes.bfloat16)
    status, _, _ = aclnnApplyProximalGradientDescentGetWorkspaceSize(
        *(tensor_from_numpy(x) for x in (var, np.array(0.5, ml_dtypes.bfloat16), np.array(0.1, ml_dtypes.bfloat16),
                                          np.array(0.3, ml_dtypes.bfloat16), var, var.copy())))
    assert status == INVALID and "var has dtype BF16" in acl.aclGetRecentErrMsg()
    half = np.zeros((3, 4), np.float16)
    status, _, _ = aclnnApplyProximalGradientDescentGetWorkspaceSize(
        *(tensor_from_numpy(x) for x in (half, np.array(0.5, np.float32), np.array(0.1, np.float16),
                                          np.array(0.3, np.float16), half, half.copy())))
    assert status == INVALID and "alpha has dtype FLOAT" in acl.aclGetRecentErrMsg()


def test_cann_prototype_runs_with_var_as_its_own_output():
    """varOut may be var (CANN allows the alias): the update lands in var."""
    rng = np.random.default_rng(3)
    var, delta = (rng.normal(size=(5, 7)).astype(np.float16) for _ in range(2))
    v = tensor_from_numpy(var)
    scal = [tensor_from_numpy(np.array(x, np.float16)) for x in (0.5, 0.1, 0.3)]
    status, ws, executor = aclnnApplyProximalGradientDescentGetWorkspaceSize(
        v, scal[0], scal[1], scal[2], tensor_from_numpy(delta), v)
    assert status == SUCCESS
    assert aclnnApplyProximalGradientDescent(None, ws, executor, None) == SUCCESS
    golden = proximal_gd_reference(var, np.float16(0.5), np.float16(0.1), np.float16(0.3), delta).astype(np.float16)
    assert compare("var", acl.tensor_to_numpy(v), golden).passed


@pytest.mark.parametrize(("form", "shrink_max"), [("raw", float("inf")), ("folded", 1.5)])
def test_own_operator_takes_bfloat16_with_float32_scalars_and_the_extra_attributes(form, shrink_max):
    rng = np.random.default_rng(7)
    var, delta = (rng.normal(size=(3, 1000)).astype(ml_dtypes.bfloat16) for _ in range(2))
    out = tensor_from_numpy(np.zeros((3, 1000), ml_dtypes.bfloat16))
    scal = [tensor_from_numpy(np.array(v, np.float32)) for v in (0.5, 0.1, 0.3)]
    status, ws, executor = aclnnAscendLoweringApplyProximalGradientDescentGetWorkspaceSize(
        tensor_from_numpy(var), scal[0], scal[1], scal[2], tensor_from_numpy(delta), form, shrink_max, out)
    assert status == SUCCESS
    assert aclnnAscendLoweringApplyProximalGradientDescent(None, ws, executor, None) == SUCCESS
    golden = proximal_gd_reference(var, 0.5, 0.1, 0.3, delta, form, shrink_max).astype(ml_dtypes.bfloat16)
    assert compare("out", acl.tensor_to_numpy(out), golden).passed
    status, _, _ = aclnnAscendLoweringApplyProximalGradientDescentGetWorkspaceSize(
        tensor_from_numpy(var), scal[0], scal[1], scal[2], tensor_from_numpy(delta), "neither", shrink_max, out)
    assert status == INVALID


def test_launch_workspace_and_stream_checks():
    status, _, executor = prox()
    assert status == SUCCESS
    _, stream = acl.aclrtCreateStream()
    assert acl.aclrtDestroyStream(stream) == SUCCESS
    assert aclnnApplyProximalGradientDescent(None, 0, executor, stream) == INVALID
    assert aclnnApplyProximalGradientDescent(None, 16, executor, None) == NULLPTR  # size without memory


def test_zero_d_tensors_keep_their_rank():
    scalar = tensor_from_numpy(np.array(0.25, np.float32))
    assert scalar.view_dims == () and acl.tensor_to_numpy(scalar).shape == ()


def test_memory_and_tensor_creation():
    status, ptr = acl.aclrtMalloc(64)
    assert status == SUCCESS and ptr.data.ctypes.data % acl.DEVICE_ALIGN == 0
    host = np.arange(16, dtype=np.float32)
    assert acl.aclrtMemcpy(ptr, 64, host, 64, AclrtMemcpyKind.HOST_TO_DEVICE) == SUCCESS
    assert acl.aclrtMemcpy(ptr, 64, host, 64, AclrtMemcpyKind.DEVICE_TO_HOST) == INVALID  # wrong kind
    assert acl.aclrtMemcpy(ptr, 32, host, 64, AclrtMemcpyKind.HOST_TO_DEVICE) == INVALID  # > destMax
    assert acl.aclrtMemcpy(None, 64, host, 64, AclrtMemcpyKind.HOST_TO_DEVICE) == NULLPTR
    # a strided view: every other element
    view = acl.aclCreateTensor([8], AclDataType.FLOAT, [2], 0, AclFormat.ND, [16], ptr)
    assert view is not None and acl.tensor_to_numpy(view).tolist() == list(range(0, 16, 2))
    assert acl.aclCreateTensor([17], AclDataType.FLOAT, None, 0, AclFormat.ND, [17], ptr) is None  # too big
    assert acl.aclCreateTensor([4], AclDataType.FLOAT, None, 0, AclFormat.ND, [4], None) is None
    back = np.zeros(16, np.float32)
    assert acl.aclrtMemcpy(back, 64, ptr, 64, AclrtMemcpyKind.DEVICE_TO_HOST) == SUCCESS
    assert np.array_equal(back, host)
    assert acl.aclrtFree(ptr) == SUCCESS
    assert acl.aclrtMemcpy(back, 64, ptr, 64, AclrtMemcpyKind.DEVICE_TO_HOST) == INVALID


def test_kernel_failure_surfaces_at_synchronize(monkeypatch):
    class Broken(aclnn.Backend):
        name = "broken"

        def run(self, call):
            raise RuntimeError("boom")

    monkeypatch.setattr(aclnn, "_device", aclnn._Device())  # restored after the test
    aclnn.set_device_backend(Broken(), "ascend910b")
    assert aclnn.current_backend()[1] == "ascend910b"
    status, ws, executor = sl1()
    assert status == SUCCESS
    _, stream = acl.aclrtCreateStream()
    assert aclnnSmoothL1LossBackward(None, ws, executor, stream) == SUCCESS
    assert acl.aclrtSynchronizeStream(stream) == AclnnStatus.RUNTIME_ERROR
    assert "boom" in acl.aclGetRecentErrMsg()
