"""One emitted operator: every kernel variant of one fused op type for one target.

The variants share CANN's op name, one OpDef (every dtype combination they take), one tiling
function (which recomputes the variant from the call and sets its tiling key) and one kernel
entry (which branches on that key). See codegen/variants.py for the key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from codegen.artifact import KernelArtifact
from codegen.errors import CodegenError
from codegen.names import snake_case
from codegen.targets import Target


@dataclass(frozen=True)
class OperatorProject:
    op_type: str
    target: Target
    variants: tuple[KernelArtifact, ...]  # ordered by tiling key

    def __post_init__(self) -> None:
        if not self.variants:
            raise CodegenError(f"an operator project of {self.op_type} needs a kernel")
        keys = [a.key_base for a in self.variants]
        if len(set(keys)) != len(keys):
            raise CodegenError(f"{self.op_type}: two kernels share a tiling key")
        for a in self.variants:
            if a.kernel.op_type != self.op_type or a.target != self.target:
                raise CodegenError(f"kernel {a.variant_tag} is not {self.op_type} for {self.target.name}")

    @property
    def op_name(self) -> str:
        return self.op_type

    @property
    def file_stem(self) -> str:
        """The op build's name for the op's files and kernel entry (snake_case of the op type)."""
        return snake_case(self.op_type)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for a in self.variants for n in a.nodes)


def project_of(artifacts: list[KernelArtifact] | tuple[KernelArtifact, ...]) -> OperatorProject:
    """The project of kernels of one op type and target, variants ordered by tiling key."""
    first = artifacts[0]
    return OperatorProject(
        first.kernel.op_type, first.target, tuple(sorted(artifacts, key=lambda a: a.key_base))
    )


def operator_projects(artifacts: list[KernelArtifact]) -> list[OperatorProject]:
    """One project per (op type, target), in first-use order. Artifacts of one variant (from
    several models, say) merge into one that serves all their nodes."""
    groups: dict[tuple[str, str], dict[int, KernelArtifact]] = {}
    for a in artifacts:
        variants = groups.setdefault((a.kernel.op_type, a.target.name), {})
        seen = variants.get(a.key_base)
        if seen is None:
            variants[a.key_base] = a
        elif seen.structure != a.structure:
            raise CodegenError(f"{a.kernel.op_type}: two different kernels for variant {a.variant_label}")
        else:
            variants[a.key_base] = replace(seen, nodes=seen.nodes + a.nodes)
    return [project_of(list(g.values())) for g in groups.values()]
