"""A kernel for one target with its buffers: what codegen hands to the emitter, the runtime and
the report. Kernels that differ only in values read at tiling time share one structure_text."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from codegen.buffers import Allocation
from codegen.ir import Instr, Kernel, format_kernel, is_attr, make_attrs
from codegen.names import snake_case
from codegen.schedule import VARIANT_SHIFT, Plan, check_plan, make_plan, variant_key_base
from codegen.targets import Target

SAMPLE_ELEMENTS = 1 << 24  # the size report() shows block dim and tile size for
SAMPLE_ROW = 1024  # the row of the sample a broadcast input is (a per-feature label)
_DTYPE_TAGS = {"float32": "F32", "float16": "F16", "bfloat16": "Bf16"}


def structure_text(k: Kernel) -> str:
    """The IR text with every attribute SConst's value blanked: equal for kernels that differ
    only in values the operator reads at tiling time, i.e. for one emitted variant."""
    instrs = tuple(
        Instr(i.op, i.dtype, i.kind, i.srcs, make_attrs(attr=i.attr("attr"), value=0.0))
        if is_attr(i) else i
        for i in k.instrs
    )
    return format_kernel(replace(k, instrs=instrs))


@dataclass(frozen=True)
class KernelArtifact:
    """One distinct kernel for one target, and the fused nodes it serves."""

    kernel: Kernel
    target: Target
    nodes: tuple[str, ...]  # model node names: untrusted text (see codegen.names.safe_text)
    allocation: Allocation

    @cached_property
    def ir_text(self) -> str:
        return format_kernel(self.kernel)

    @cached_property
    def structure(self) -> str:
        return structure_text(self.kernel)

    @property
    def key_base(self) -> int:
        """The tiling key of this variant with single buffering (codegen/variants.py)."""
        return variant_key_base(self.kernel)

    @property
    def variant_tag(self) -> str:
        """A C++-safe name of the variant, unique within its operator, e.g. F16V5."""
        return f"{_DTYPE_TAGS[self.kernel.dtype]}V{self.key_base >> VARIANT_SHIFT}"

    @property
    def variant_label(self) -> str:
        """The variant for people: dtype and axis values, e.g. 'float16 dout=scalar ...'."""
        return " ".join([self.kernel.dtype, *(f"{a}={v}" for a, v in self.kernel.variant)])

    @property
    def op_name(self) -> str:
        """The emitted operator's name: CANN's op type."""
        return self.kernel.op_type

    @property
    def file_stem(self) -> str:
        """snake_case of the op type: the project directory, file names and kernel entry."""
        return snake_case(self.op_name)

    def schedule(self, num_elements: int, shapes: Mapping[str, tuple[int, ...]] | None = None) -> Plan:
        """The checked plan; `shapes` (input name -> shape) when the kernel has broadcast inputs."""
        plan = make_plan(self.kernel, self.allocation, self.target, num_elements, shapes)
        check_plan(plan, self.kernel, self.allocation, self.target)
        return plan

    def sample_shapes(self, sample_elements: int) -> dict[str, tuple[int, ...]] | None:
        """Shapes for a sample plan: rows of SAMPLE_ROW elements, a broadcast input one row."""
        if not any(p.broadcast for p in self.kernel.inputs):
            return None
        rows = (-(-sample_elements // SAMPLE_ROW), SAMPLE_ROW)
        return {p.name: (1, SAMPLE_ROW) if p.broadcast else rows for p in self.kernel.inputs}

    def report(self, sample_elements: int = SAMPLE_ELEMENTS) -> dict[str, object]:
        """For report.json; a kernel with broadcast inputs is sampled with them as row vectors."""
        shapes = self.sample_shapes(sample_elements)
        if shapes is not None:
            sample_elements = math.prod(shapes[self.kernel.inputs[0].name])
        plan = self.schedule(sample_elements, shapes)
        return {
            "kernel": self.file_stem,
            "op": self.kernel.op_type,
            "dtype": self.kernel.dtype,
            "variant": dict(self.kernel.variant),
            "target": self.target.name,
            "nodes": list(self.nodes),
            "tiling_key": plan.tiling_key,
            "ub_bytes_per_element": {
                "single_buffer": self.allocation.bytes_per_element(1),
                "double_buffer": self.allocation.bytes_per_element(2),
            },
            "vector_instructions_per_tile": self.kernel.vector_instruction_count(),
            "sample": {
                "num_elements": sample_elements,
                "block_dim": plan.block_dim,
                "tile_elems": plan.tile_elems,
                "buffer_num": plan.buffer_num,
                "ub_bytes": plan.ub_bytes,
            },
        }
