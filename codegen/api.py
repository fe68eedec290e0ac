"""Public API of codegen: fused nodes -> kernels (IR + allocation) -> plans, reports, projects.

    kernel_for_node(model, node)           -> Kernel (lowered and optimised IR)
    build_kernels(model, target)           -> [KernelArtifact], one per distinct kernel variant
    artifact.schedule(num_elements)        -> Plan (checked)
    artifact.report()                      -> dict for report.json
    artifact.emit(kernels_dir)             -> [Path] of an operator project of this variant alone
    emit_kernels(artifacts, kernels_dir)   -> [Path] of one operator project per op type

A kernel variant is what codegen/variants.py names (dtype, reduction, dout kind, scalar form...);
the values a node carries (sigma, scale, shrink_max, the scalar inputs) are read at tiling or run
time. build_kernels keys each node by `node_key` (op type, variant, the shape facts the rules
check) and lowers each key once, so generation cost follows distinct kernels, not nodes. All
variants of one op type form one operator project (codegen/project.py) with CANN's op name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import onnx

from codegen.buffers import Allocation, allocate
from codegen.ir import Instr, Kernel, format_kernel, is_attr, make_attrs
from codegen.names import safe_text, snake_case
from codegen.nodes import ModelTables, NodeSpec, fused_nodes, node_spec
from codegen.passes import optimize
from codegen.project import OperatorProject, operator_projects, project_of
from codegen.rules import lower_node, node_variant
from codegen.rules.common import same_shape
from codegen.schedule import Plan, check_plan, make_plan, variant_key_base
from codegen.target_passes import for_target
from codegen.targets import Target, get_target

SAMPLE_ELEMENTS = 1 << 24  # the size report() shows block dim and tile size for
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


def kernel_for_spec(spec: NodeSpec) -> Kernel:
    """Lower one fused node (as NodeSpec) and run the generic passes."""
    return optimize(lower_node(spec))


def kernel_for_node(model: onnx.ModelProto, node: onnx.NodeProto, tables: ModelTables | None = None) -> Kernel:
    return kernel_for_spec(node_spec(model, node, tables))


def artifact_for_target(kernel: Kernel, target: str | Target, nodes: tuple[str, ...] = ()) -> KernelArtifact:
    """The artifact of a target-independent kernel as build_kernels makes it for `target`
    (codegen/target_passes.py rewrites applied, buffers allocated)."""
    tgt = target if isinstance(target, Target) else get_target(target)
    kernel = for_target(kernel, tgt)
    return KernelArtifact(kernel, tgt, nodes, allocate(kernel))


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
        return f"{_DTYPE_TAGS[self.kernel.dtype]}V{self.key_base >> 9}"

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

    def schedule(self, num_elements: int) -> Plan:
        plan = make_plan(self.kernel, self.allocation, self.target, num_elements)
        check_plan(plan, self.kernel, self.allocation, self.target)
        return plan

    def report(self, sample_elements: int = SAMPLE_ELEMENTS) -> dict[str, object]:
        plan = self.schedule(sample_elements)
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

    def emit(self, kernels_dir: str | Path) -> list[Path]:
        """Write an operator project of this variant alone to kernels_dir/<file_stem>/."""
        return project_of([self]).emit(kernels_dir)


def node_key(spec: NodeSpec) -> tuple:
    """What lowering reads of a node besides values read at tiling or run time: its op type,
    variant (which also checks its attributes), input dtypes and the shape facts the rules
    check (one element; same known shape as the first input)."""
    first = next(iter(spec.inputs.values())).shape
    inputs = tuple(
        (role, i.dtype, i.numel() == 1, same_shape(i.shape, first))
        for role, i in spec.inputs.items()
    )
    return spec.op_type, node_variant(spec), inputs


def build_kernels(model: onnx.ModelProto, target: str) -> list[KernelArtifact]:
    """One artifact per distinct kernel variant of the model's fused nodes, in first-use order;
    each node is lowered only when its node_key is new."""
    tgt = get_target(target)
    by_key: dict[tuple, str] = {}
    by_text: dict[str, tuple[Kernel, list[str]]] = {}
    tables = ModelTables(model)
    for node in fused_nodes(model):
        spec = node_spec(model, node, tables)
        key = node_key(spec)
        text = by_key.get(key)
        if text is None:
            kernel = for_target(kernel_for_spec(spec), tgt)
            text = by_key[key] = structure_text(kernel)
            by_text.setdefault(text, (kernel, []))
        by_text[text][1].append(node.name)
    return [
        KernelArtifact(kernel, tgt, tuple(names), allocate(kernel))
        for kernel, names in by_text.values()
    ]


def projects(artifacts: list[KernelArtifact]) -> list[OperatorProject]:
    """The operator projects emit_kernels writes: one per op type and target."""
    return operator_projects(artifacts)


def emit_kernels(artifacts: list[KernelArtifact], kernels_dir: str | Path) -> list[Path]:
    """Write one operator project per op type (and target) under kernels_dir."""
    paths: list[Path] = []
    for project in operator_projects(artifacts):
        paths += project.emit(kernels_dir)
    return paths


def format_ir(artifacts: list[KernelArtifact]) -> str:
    """What `lower MODEL --emit ir` prints: each kernel's IR under a comment naming its nodes
    (attribute SConsts show the first node's value; the operator reads each call's)."""
    blocks = []
    for art in artifacts:
        nodes = ", ".join(safe_text(n) for n in art.nodes)
        blocks.append(
            f"# {art.file_stem} {art.variant_tag} ({art.target.name}) serves: {nodes}\n{art.ir_text}"
        )
    return "\n".join(blocks)
