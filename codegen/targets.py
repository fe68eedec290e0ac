"""The Ascend targets codegen schedules for (DESIGN section 4; sources: cann_facts.md A and B).

The table is data so the scheduler, the emitter and the CPU backend read the same numbers.
Names come from the toolkit: `compute_unit` is what the custom-operator project's cmake takes in
ASCEND_COMPUTE_UNIT and OpDef's AICore().AddConfig(...) takes (lower-case Short_SoC_version of
the platform configs, data/platform_config/*.ini); `soc_versions` are the full SoC_version names
of those configs, the only names the direct kernel-launch cmake (SOC_VERSION) accepts.
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
    compute_unit: str  # AICore().AddConfig(...) and ASCEND_COMPUTE_UNIT
    short_soc: str  # Short_SoC_version of the platform config
    soc_versions: tuple[str, ...]  # SoC_version names of the platform configs of this unit
    aiv_cores: int
    ub_bytes: int
    select_scratch_bytes: int
    bf16_compare: bool  # Compare accepts bfloat16 operands directly
    native_sign: bool  # Sign is one instruction; else the chunked high-level API (target_passes)
    overflow_modes: tuple[str, ...]  # float->half overflow modes the runtime supports
    notes: str


TARGETS: dict[str, Target] = {
    "ascend950": Target(
        name="ascend950",
        npu_arch=3510,
        compute_unit="ascend950",
        short_soc="Ascend950",
        soc_versions=("Ascend950PR_9599", "Ascend950PR_9589", "Ascend950DT_9581", "Ascend950DT_9582",
                      "Ascend950DT_9584"),
        aiv_cores=64,
        ub_bytes=253952,
        select_scratch_bytes=0,
        bf16_compare=True,
        native_sign=True,
        overflow_modes=("INFNAN",),
        notes="bf16 Compare; only INF/NaN overflow mode",
    ),
    "ascend910b": Target(
        name="ascend910b",
        npu_arch=2201,
        compute_unit="ascend910b",
        short_soc="Ascend910B",
        soc_versions=("Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3", "Ascend910B4"),
        aiv_cores=48,
        ub_bytes=196352,
        select_scratch_bytes=8192,
        bf16_compare=False,
        native_sign=False,
        overflow_modes=("INFNAN", "SATURATION"),
        notes="Select tensor modes need 8 KiB scratch; 40 AIV cores on some SKUs",
    ),
    "ascend910_93": Target(
        name="ascend910_93",
        npu_arch=2201,
        compute_unit="ascend910_93",
        short_soc="Ascend910_93",
        soc_versions=("Ascend910_9391", "Ascend910_9392", "Ascend910_9381", "Ascend910_9382",
                      "Ascend910_9372", "Ascend910_9362"),
        aiv_cores=48,
        ub_bytes=196352,
        select_scratch_bytes=8192,
        bf16_compare=False,
        native_sign=False,
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
