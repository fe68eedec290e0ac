"""The Ascend targets codegen schedules for (DESIGN section 4; sources: cann_facts.md A and B).

The table is data so the scheduler, the emitter and the CPU backend read the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.errors import CodegenError

UB_BLOCK_BYTES = 32  # UB addresses and DataCopy lengths come in whole 32-byte blocks
REPEAT_BYTES = 256  # one vector repeat; Compare counts must cover whole repeats


@dataclass(frozen=True)
class Target:
    """One SoC as the kernel sees it.

    ub_bytes is the kernel-side usable UB (ASC_UB_SIZE), not the physical size.
    select_scratch_bytes is the UB the tensor-tensor / tensor-scalar Select modes need as temp
    space on this SoC (0 where the masked Select needs none).
    """

    name: str
    npu_arch: int
    soc: str  # the string for AICore().AddConfig(...) and CMake's ASCEND_COMPUTE_UNIT
    aiv_cores: int
    ub_bytes: int
    select_scratch_bytes: int
    bf16_compare: bool  # Compare accepts bfloat16 operands directly
    overflow_modes: tuple[str, ...]  # float->half overflow modes the runtime supports
    notes: str


TARGETS: dict[str, Target] = {
    "ascend950": Target(
        name="ascend950",
        npu_arch=3510,
        soc="ascend950",
        aiv_cores=64,
        ub_bytes=253952,
        select_scratch_bytes=0,
        bf16_compare=True,
        overflow_modes=("INFNAN",),
        notes="bf16 Compare; only INF/NaN overflow mode",
    ),
    "ascend910b": Target(
        name="ascend910b",
        npu_arch=2201,
        soc="ascend910b",
        aiv_cores=48,
        ub_bytes=196352,
        select_scratch_bytes=8192,
        bf16_compare=False,
        overflow_modes=("INFNAN", "SATURATION"),
        notes="Select tensor modes need 8 KiB scratch; 40 AIV cores on some SKUs",
    ),
    "ascend910_93": Target(
        name="ascend910_93",
        npu_arch=2201,
        soc="ascend910_93",
        aiv_cores=48,
        ub_bytes=196352,
        select_scratch_bytes=8192,
        bf16_compare=False,
        overflow_modes=("INFNAN", "SATURATION"),
        notes="as ascend910b",
    ),
}


class UnknownTargetError(CodegenError):
    """A target name that is not in TARGETS; the message lists the known ones."""


def known_targets() -> tuple[str, ...]:
    return tuple(TARGETS)


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise UnknownTargetError(
            f"unknown target {name!r}; known targets: {', '.join(TARGETS)}"
        ) from None
