"""The CPU backend: codegen lowers and schedules the fused node, the interpreter runs the plan.

Everything the device would do comes from codegen (kernel IR, UB allocation, checked plan); this
module only connects them to the interpreter, which checks coverage and buffer sizes again
while it runs, so a scheduling bug fails here even if a plan checker let it through.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from codegen.api import KernelArtifact, artifact_for_target, kernel_for_spec
from codegen.errors import CodegenError
from codegen.nodes import NodeSpec
from codegen.schedule import Plan
from contracts.fused_ops import OP_SPECS
from runtime.backend import Backend, BackendError, KernelCall
from runtime.interpreter import Tile, execute
from runtime.numerics import NAN_POLICIES, NanPolicy


def _spec_key(spec: NodeSpec) -> tuple:
    return (spec.op_type, tuple(sorted(spec.inputs.items())), tuple(sorted(spec.attrs.items())))


@lru_cache(maxsize=64)
def _artifact(key: tuple, target: str) -> KernelArtifact:
    op_type, inputs, attrs = key
    kernel = kernel_for_spec(NodeSpec("kernel", op_type, dict(inputs), dict(attrs)))
    return artifact_for_target(kernel, target)  # what build_kernels emits for the target


def artifact_for(spec: NodeSpec, target: str) -> KernelArtifact:
    """The kernel (IR, allocation) codegen makes for a fused node on `target`, cached."""
    try:
        return _artifact(_spec_key(spec), target)
    except (CodegenError, ValueError) as exc:  # UnknownTargetError is a ValueError
        raise BackendError(f"codegen cannot lower node {spec.name!r}: {exc}") from None


def plan_tiles(plan: Plan) -> list[Tile]:
    """The plan's tiles, core by core, in the order each core runs them."""
    return [Tile(core, t, off, n) for core in range(plan.block_dim)
            for t, (off, n) in enumerate(plan.tiles(core))]


class CpuBackend(Backend):
    """Interprets the kernel IR with AscendC numerics, core by core and tile by tile."""

    name = "cpu"

    def __init__(self, nan_policy: NanPolicy = "propagate") -> None:
        if nan_policy not in NAN_POLICIES:
            raise BackendError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
        self.nan_policy = nan_policy

    def run(self, call: KernelCall) -> dict[str, np.ndarray]:
        spec = call.spec
        art = artifact_for(spec, call.target)
        first = np.asarray(call.inputs[OP_SPECS[spec.op_type].inputs[0]])
        shapes = {name: tuple(np.shape(value)) for name, value in call.inputs.items()}
        try:
            plan = art.schedule(int(first.size), shapes)
        except CodegenError as exc:
            raise BackendError(f"node {spec.name!r}: no plan for {first.size} elements: {exc}") from None
        kernel = art.kernel
        outs = execute(kernel, plan_tiles(plan), {p.name: call.inputs[p.name] for p in kernel.inputs},
                       int(first.size), self.nan_policy, art.allocation,
                       {b.name: b.bytes for b in plan.buffers}, plan.broadcasts)
        return {name: arr.reshape(first.shape) for name, arr in outs.items()}
