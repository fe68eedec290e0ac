"""The aclnn two-phase API for the fused ops, with the real API's checks and status codes.

    status, workspace_size, executor = aclnnSmoothL1LossBackwardGetWorkspaceSize(
        grad_out, self, target, reduction, beta, grad_input)
    status = aclnnSmoothL1LossBackward(workspace, workspace_size, executor, stream)
    aclrtSynchronizeStream(stream)

Checks (the real aclnn API's for these operators): a None tensor is 161001; a dtype
outside the list, rank > 8, a failed broadcast, reduction outside 0..2 or beta < 0 is 161002; an
empty input succeeds with workspace 0 and launches nothing (the output stays untouched). The
message of a failed call is in acl.aclGetRecentErrMsg().

Like the real L2 layer, the shim promotes mixed dtypes and casts the kernel's result to the output
tensor's dtype on the host. The kernel broadcasts target and gradOut to self's shape itself
(broadcast loads), as CANN's kernel does; only when self is the input that grows (the broadcast
shape is not self's) does the shim expand self on the host, since the kernel writes an output of
its first input's shape.
`run_fused` is the same path for a fused node of a graph, whose attributes the fused-op contract
defines (contracts/fused_ops.py) rather than the built-in aclnn signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import OP_SPECS, PROXIMAL_GD, REDUCTIONS, SCALAR_FORMS, SMOOTH_L1_GRAD
from runtime import acl
from runtime.acl import (
    DTYPE_NAMES,
    AclDataType,
    AclnnStatus,
    AclTensor,
    DevicePtr,
    Stream,
)
from runtime.backend import DEFAULT_TARGET, Backend, BackendError, KernelCall
from runtime.numerics import NUMPY_DTYPES

MAX_RANK = 8
_FLOAT_TYPES = (AclDataType.FLOAT, AclDataType.FLOAT16, AclDataType.BF16)


@dataclass
class _Device:
    backend: Backend | None = None
    target: str = DEFAULT_TARGET


_device = _Device()


def set_device_backend(backend: Backend, target: str = DEFAULT_TARGET) -> None:
    """Choose the backend and SoC that executors created from now on launch on."""
    _device.backend = backend
    _device.target = target


def current_backend() -> tuple[Backend, str]:
    if _device.backend is None:
        from runtime.backends import (
            get_backend,  # the CPU backend by default, made on first use
        )

        _device.backend = get_backend("cpu")
    return _device.backend, _device.target


@dataclass
class AclOpExecutor:
    """What phase one prepared: the kernel call (None: nothing to launch) and where results go."""

    call: KernelCall | None
    output: AclTensor | None
    output_name: str
    backend: Backend | None
    workspace_size: int = 0
    used: bool = False

    def launch(self) -> None:
        if self.call is None or self.output is None or self.backend is None:
            return
        result = self.backend.run(self.call)[self.output_name]
        out_dt = acl.numpy_dtype(self.output.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            self.output.write(np.asarray(result).reshape(self.output.view_dims).astype(out_dt))


class _Invalid(Exception):
    def __init__(self, status: AclnnStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def _fail(status: AclnnStatus, message: str) -> tuple[int, int, None]:
    acl.set_recent_error(message)
    return int(status), 0, None


def _promote(a: AclDataType, b: AclDataType) -> AclDataType:
    """PyTorch-like promotion over the float types (float16 with bfloat16 gives float32)."""
    if a == b:
        return a
    return AclDataType.FLOAT


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _dtype_ok(t: AclTensor, role: str, allowed: tuple[AclDataType, ...]) -> None:
    if t.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise _Invalid(AclnnStatus.PARAM_INVALID, f"{role} has dtype {t.dtype.name}; supported: {names}")


def _rank_ok(t: AclTensor, role: str) -> None:
    if len(t.view_dims) > MAX_RANK:
        raise _Invalid(AclnnStatus.PARAM_INVALID, f"{role} has rank {len(t.view_dims)} > {MAX_RANK}")


def _host(t: AclTensor, dtype: AclDataType) -> np.ndarray:
    return np.asarray(t.read(), order="C").astype(acl.numpy_dtype(dtype), copy=False)


def aclnnSmoothL1LossBackwardGetWorkspaceSize(
    grad_out: AclTensor | None, self: AclTensor | None, target: AclTensor | None,
    reduction: int, beta: float, grad_input: AclTensor | None,
) -> tuple[int, int, AclOpExecutor | None]:
    """Phase one of aclnnSmoothL1LossBackward: (status, workspace size, executor)."""
    tensors = {"gradOut": grad_out, "self": self, "target": target, "gradInput": grad_input}
    missing = [k for k, v in tensors.items() if v is None]
    if missing:
        return _fail(AclnnStatus.PARAM_NULLPTR, f"aclnnSmoothL1LossBackward: {missing[0]} is nullptr")
    assert grad_out is not None and self is not None and target is not None and grad_input is not None
    present = {k: v for k, v in tensors.items() if v is not None}
    try:
        for role, t in present.items():
            _dtype_ok(t, role, _FLOAT_TYPES)
        for role in ("gradOut", "self", "target"):
            _rank_ok(present[role], role)
        if not 0 <= int(reduction) <= 2:
            raise _Invalid(AclnnStatus.PARAM_INVALID, f"reduction {reduction} is not 0 (none), 1 (mean) or 2 (sum)")
        if not float(beta) >= 0.0:
            raise _Invalid(AclnnStatus.PARAM_INVALID, f"beta {beta} must be >= 0")
        promoted = _promote(_promote(grad_out.dtype, self.dtype), target.dtype)
        shape = _broadcast(grad_out.view_dims, self.view_dims)
        shape = None if shape is None else _broadcast(shape, target.view_dims)
        if shape is None:
            raise _Invalid(AclnnStatus.PARAM_INVALID,
                           f"gradOut {list(grad_out.view_dims)}, self {list(self.view_dims)} and "
                           f"target {list(target.view_dims)} do not broadcast")
        if shape != grad_input.view_dims:
            raise _Invalid(AclnnStatus.PARAM_INVALID,
                           f"broadcast shape {list(shape)} != gradInput shape {list(grad_input.view_dims)}")
    except _Invalid as exc:
        return _fail(exc.status, f"aclnnSmoothL1LossBackward: {exc}")
    if min(grad_out.numel, self.numel, target.numel) == 0:
        return int(AclnnStatus.SUCCESS), 0, AclOpExecutor(None, None, "gradient", None)

    numel = int(np.prod(shape, dtype=np.int64))
    predict = np.broadcast_to(_host(self, promoted), shape)
    label = _host(target, promoted)
    dout = _host(grad_out, promoted)
    red = REDUCTIONS[int(reduction)]  # aclnn numbers them in this order
    # The kernel's mean norm is 1/numel(predict); aclnn's is 1/numel(self) before broadcasting.
    scale = numel / self.numel if red == "mean" else 1.0
    dt = DTYPE_NAMES[promoted]
    spec = NodeSpec("aclnnSmoothL1LossBackward", SMOOTH_L1_GRAD, {
        "predict": InputSpec(dt, shape), "label": InputSpec(dt, tuple(label.shape)),
        "dout": InputSpec(dt, tuple(dout.shape)),
    }, {"sigma": float(beta), "reduction": red, "scale": float(scale)})
    inputs = {"predict": np.asarray(predict, order="C"), "label": np.asarray(label, order="C"),
              "dout": np.asarray(dout, order="C")}
    backend, soc = current_backend()
    return int(AclnnStatus.SUCCESS), 0, AclOpExecutor(KernelCall(spec, inputs, soc), grad_input,
                                                      "gradient", backend)


_CANN_PROX_TYPES = (AclDataType.FLOAT, AclDataType.FLOAT16)


def aclnnApplyProximalGradientDescentGetWorkspaceSize(
    var: AclTensor | None, alpha: AclTensor | None, l1: AclTensor | None, l2: AclTensor | None,
    delta: AclTensor | None, var_out: AclTensor | None,
) -> tuple[int, int, AclOpExecutor | None]:
    """Phase one of aclnnApplyProximalGradientDescent, CANN's prototype: (status, workspace size,
    executor). Float or float16, every tensor of var's dtype; not in place (var_out may be var)."""
    return _proximal("aclnnApplyProximalGradientDescent", var, alpha, l1, l2, delta, var_out,
                     _CANN_PROX_TYPES, {"scalar_form": "raw", "shrink_max": float("inf")}, scalars_any_float=False)


def aclnnAscendLoweringApplyProximalGradientDescentGetWorkspaceSize(
    var: AclTensor | None, alpha: AclTensor | None, l1: AclTensor | None, l2: AclTensor | None,
    delta: AclTensor | None, scalar_form: str, shrink_max: float, var_out: AclTensor | None,
) -> tuple[int, int, AclOpExecutor | None]:
    """Phase one of the project's own operator (the aclnn API its op build generates: inputs,
    attributes, output): the scalar forms, a clamp, bfloat16, and float32 scalars beside any
    tensor dtype."""
    api = "aclnnAscendLoweringApplyProximalGradientDescent"
    if scalar_form not in SCALAR_FORMS:
        return _fail(AclnnStatus.PARAM_INVALID, f"{api}: scalarForm {scalar_form!r} is not one of {SCALAR_FORMS}")
    return _proximal(api, var, alpha, l1, l2, delta, var_out, _FLOAT_TYPES,
                     {"scalar_form": scalar_form, "shrink_max": float(shrink_max)}, scalars_any_float=True)


def _proximal(api: str, var: AclTensor | None, alpha: AclTensor | None, l1: AclTensor | None,
              l2: AclTensor | None, delta: AclTensor | None, var_out: AclTensor | None,
              types: tuple[AclDataType, ...], attrs: dict[str, object],
              scalars_any_float: bool) -> tuple[int, int, AclOpExecutor | None]:
    tensors = {"var": var, "alpha": alpha, "l1": l1, "l2": l2, "delta": delta, "varOut": var_out}
    missing = [k for k, v in tensors.items() if v is None]
    if missing:
        return _fail(AclnnStatus.PARAM_NULLPTR, f"{api}: {missing[0]} is nullptr")
    assert var is not None and delta is not None and var_out is not None
    present = {k: v for k, v in tensors.items() if v is not None}
    try:
        for role in ("var", "delta", "varOut"):
            _dtype_ok(present[role], role, types)
        if not var.dtype == delta.dtype == var_out.dtype:
            raise _Invalid(AclnnStatus.PARAM_INVALID,
                           f"var, delta and varOut must share one dtype, got {var.dtype.name}, "
                           f"{delta.dtype.name}, {var_out.dtype.name}")
        for role in ("alpha", "l1", "l2"):
            t = tensors[role]
            assert t is not None
            _dtype_ok(t, role, (var.dtype, AclDataType.FLOAT) if scalars_any_float else (var.dtype,))
            if t.numel != 1:
                raise _Invalid(AclnnStatus.PARAM_INVALID, f"{role} must hold one element, has {t.numel}")
        for role in ("var", "delta", "varOut"):
            _rank_ok(present[role], role)
        if not var.view_dims == delta.view_dims == var_out.view_dims:
            raise _Invalid(AclnnStatus.PARAM_INVALID,
                           f"var {list(var.view_dims)}, delta {list(delta.view_dims)} and varOut "
                           f"{list(var_out.view_dims)} must have one shape")
    except _Invalid as exc:
        return _fail(exc.status, f"{api}: {exc}")
    if var.numel == 0:
        return int(AclnnStatus.SUCCESS), 0, AclOpExecutor(None, None, "var_out", None)
    dt = DTYPE_NAMES[var.dtype]
    inputs = {"var": _host(var, var.dtype), "delta": _host(delta, var.dtype)}
    specs = {"var": InputSpec(dt, var.view_dims), "delta": InputSpec(dt, var.view_dims)}
    for role in ("alpha", "l1", "l2"):
        t = tensors[role]
        assert t is not None
        inputs[role] = _host(t, t.dtype).reshape(t.view_dims)
        specs[role] = InputSpec(DTYPE_NAMES[t.dtype], t.view_dims)
    spec = NodeSpec(api, PROXIMAL_GD, {r: specs[r] for r in OP_SPECS[PROXIMAL_GD].inputs}, attrs)
    backend, soc = current_backend()
    # the inputs are read into host arrays first, so var_out may be var's own memory (CANN allows it)
    return int(AclnnStatus.SUCCESS), 0, AclOpExecutor(KernelCall(spec, inputs, soc), var_out,
                                                      "var_out", backend)


def _launch(workspace: DevicePtr | None, workspace_size: int, executor: AclOpExecutor | None,
            stream: Stream | None, api: str) -> int:
    if executor is None:
        acl.set_recent_error(f"{api}: executor is nullptr")
        return int(AclnnStatus.PARAM_NULLPTR)
    if executor.used:
        acl.set_recent_error(f"{api}: executor was already launched (executors are single use)")
        return int(AclnnStatus.PARAM_INVALID)
    if workspace_size < executor.workspace_size:
        acl.set_recent_error(f"{api}: workspace of {workspace_size} bytes < {executor.workspace_size} needed")
        return int(AclnnStatus.PARAM_INVALID)
    if workspace is None and workspace_size > 0:
        acl.set_recent_error(f"{api}: workspace is nullptr but workspaceSize is {workspace_size}")
        return int(AclnnStatus.PARAM_NULLPTR)
    if stream is not None and stream.destroyed:
        acl.set_recent_error(f"{api}: stream was destroyed")
        return int(AclnnStatus.PARAM_INVALID)
    executor.used = True
    if stream is None:  # the default stream: run now
        try:
            executor.launch()
        except BackendError as exc:
            acl.set_recent_error(f"{api}: {exc}")
            return int(AclnnStatus.RUNTIME_ERROR)
    else:
        stream.pending.append(executor.launch)
    return int(AclnnStatus.SUCCESS)


def aclnnSmoothL1LossBackward(workspace: DevicePtr | None, workspace_size: int,
                              executor: AclOpExecutor | None, stream: Stream | None) -> int:
    return _launch(workspace, workspace_size, executor, stream, "aclnnSmoothL1LossBackward")


def aclnnApplyProximalGradientDescent(workspace: DevicePtr | None, workspace_size: int,
                                      executor: AclOpExecutor | None, stream: Stream | None) -> int:
    return _launch(workspace, workspace_size, executor, stream, "aclnnApplyProximalGradientDescent")


def aclnnAscendLoweringApplyProximalGradientDescent(workspace: DevicePtr | None, workspace_size: int,
                                                    executor: AclOpExecutor | None, stream: Stream | None) -> int:
    return _launch(workspace, workspace_size, executor, stream, "aclnnAscendLoweringApplyProximalGradientDescent")


def run_fused(spec: NodeSpec, inputs: Mapping[str, np.ndarray], backend: Backend,
              target: str) -> dict[str, np.ndarray]:
    """Run one fused node of a graph on `backend`: the path `lower diff` takes for fused nodes.

    The node's arguments were checked when it was fused and are checked again by codegen's
    lowering (contract of contracts/fused_ops.py), so unlike the aclnn entry points above there
    is no status code here: a node that cannot run raises BackendError. Empty inputs launch
    nothing and give an empty output, as the aclnn empty-tensor rule says.
    """
    op = OP_SPECS[spec.op_type]
    first = np.asarray(inputs[op.inputs[0]])
    if first.size == 0 or any(np.asarray(inputs[r]).size == 0 for r in op.inputs):
        dtype = NUMPY_DTYPES[spec.inputs[op.inputs[0]].dtype]
        return {name: np.zeros(first.shape, dtype) for name in op.outputs}
    out = backend.run(KernelCall(spec, dict(inputs), target))
    return {k: np.asarray(v).reshape(first.shape) for k, v in out.items()}

