"""onnxruntime-training ops that onnxruntime's CPU package does not register, run by lower itself.

onnxruntime-training's graphs (generate_artifacts' training_model.onnx) hold training-only
com.microsoft ops; the onnxruntime package that `lower diff` and `--verify` run has no schema for
them and refuses the whole model. These are the ones whose meaning onnxruntime documents in the
op's schema (orttraining/orttraining/core/graph/training_op_defs.cc) and defines in its CPU
kernel; each is computed here as that kernel computes it, in the kernel's own dtypes:

- `Scale(input, scale)`, attribute `scale_down` (default 0): "if true, the output tensor is
  input tensor divided by scale, otherwise, it's input tensor multiplied by scale". The CPU kernel
  (orttraining/orttraining/training_ops/cpu/math/scale.cc) reads the one-element `scale` as a float
  (float32), takes its float32 reciprocal for scale_down, casts that to T and multiplies: for
  scale_down a float32 input is `x * fl32(1 / fl32(s))`, not `x / s`. T is float or double, the
  scale float, double, int64 or int32; the kernel refuses a scale of 0.
- `InPlaceAccumulatorV2(accumulation_buffer, value, overwrite_flag?)`: "in-place accumulator
  for tensors"; with `overwrite_flag` true the buffer becomes `value`, otherwise `buffer + value`
  (broadcast as Add). The buffer is written in place; output 0 `updated_flag` is a one-element
  true, the optional output 1 a copy of the updated buffer
  (orttraining/orttraining/training_ops/cpu/optimizer/gradient_control.cc, float only).

Anything outside those dtypes is refused with ContribOpError rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from contracts.errors import ToolError
from lowering.terminal import printable

MS_DOMAIN = "com.microsoft"


class ContribOpError(ToolError, ValueError):
    """A node lower's implementation of the op cannot run as onnxruntime-training would."""


@dataclass
class ContribResult:
    outputs: list[np.ndarray | None]  # by output position; None where the node names no output
    updates: dict[int, np.ndarray] = field(default_factory=dict)  # input position -> value written in place


def _attr_int(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _fail(node: onnx.NodeProto, why: str) -> ContribOpError:
    return ContribOpError(f"{MS_DOMAIN} {node.op_type} node '{printable(node.name)}': {why}")


def _scale(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> ContribResult:
    x, s = inputs[0], inputs[1]
    if x is None or s is None:
        raise _fail(node, "needs both inputs")
    if x.dtype not in (np.float32, np.float64):
        raise _fail(node, f"input is {x.dtype}; onnxruntime-training's CPU kernel takes float and double")
    if s.dtype not in (np.float32, np.float64, np.int64, np.int32):
        raise _fail(node, f"scale is {s.dtype}; the CPU kernel takes float, double, int64 and int32")
    if s.size != 1:
        raise _fail(node, f"scale holds {s.size} values, the kernel takes one")
    value = np.float32(s.reshape(-1)[0])
    if value == 0:
        raise _fail(node, "scale is 0, which the kernel refuses")
    if _attr_int(node, "scale_down", 0):
        value = np.float32(1) / value
    with np.errstate(over="ignore", invalid="ignore"):
        return ContribResult([x * x.dtype.type(value)])


def _in_place_accumulator_v2(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> ContribResult:
    buffer, value = inputs[0], inputs[1]
    flag = inputs[2] if len(inputs) > 2 else None
    if buffer is None or value is None:
        raise _fail(node, "needs the buffer and the value")
    if buffer.dtype != np.float32 or value.dtype != np.float32:
        raise _fail(node, f"buffer {buffer.dtype}, value {value.dtype}; onnxruntime-training's CPU kernel "
                          "takes float")
    if flag is not None and bool(np.asarray(flag).reshape(-1)[0]):
        if value.size != buffer.size:
            raise _fail(node, f"overwrites a buffer of {buffer.size} elements with {value.size}")
        updated = value.reshape(buffer.shape).copy()
    else:
        try:
            updated = buffer + value
        except ValueError:
            raise _fail(node, f"buffer {list(buffer.shape)} and value {list(value.shape)} do not broadcast") from None
        if updated.shape != buffer.shape:
            raise _fail(node, f"buffer {list(buffer.shape)} cannot hold buffer + value {list(updated.shape)}")
    outputs: list[np.ndarray | None] = [np.ones(1, np.bool_)]
    if len(node.output) > 1 and node.output[1]:
        outputs.append(updated.reshape(value.shape).copy())
    return ContribResult(outputs, {0: updated})


Implementation = Callable[[onnx.NodeProto, Sequence[np.ndarray | None]], ContribResult]

IMPLEMENTED: dict[tuple[str, str], Implementation] = {
    (MS_DOMAIN, "Scale"): _scale,
    (MS_DOMAIN, "InPlaceAccumulatorV2"): _in_place_accumulator_v2,
}


def implements(node: onnx.NodeProto) -> bool:
    return (node.domain, node.op_type) in IMPLEMENTED


def run_contrib(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> ContribResult:
    """Run `node` (one implements() accepts) on its inputs by position (None: input left out)."""
    result = IMPLEMENTED[(node.domain, node.op_type)](node, inputs)
    if len(result.outputs) < len(node.output):
        result.outputs.extend([None] * (len(node.output) - len(result.outputs)))
    return result
