"""Public API of codegen: fused nodes -> kernels (IR + allocation) -> plans, reports, projects.

    kernel_for_node(model, node)           -> Kernel (lowered and optimised IR)
    build_kernels(model, target)           -> [KernelArtifact], one per distinct kernel
    artifact.schedule(num_elements)        -> Plan (checked)
    artifact.report()                      -> dict for report.json
    artifact.emit(kernels_dir)             -> [Path] of the AscendC project written
    emit_kernels(artifacts, kernels_dir)   -> [Path] for all of them

Distinct kernels are deduplicated twice: nodes that look the same to the lowering rules (op type,
input dtypes, shapes and constants, attributes: `spec_key`) are lowered once, and nodes whose
optimised IR prints the same share one artifact (and one emitted project). A variant's name is the op type, the dtype and a hash of its
IR text, so it depends only on what the kernel computes, never on node names.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import onnx

from codegen.buffers import Allocation, allocate
from codegen.emit import emit_project
from codegen.ir import Kernel, format_kernel
from codegen.names import safe_text, snake_case
from codegen.nodes import ModelTables, NodeSpec, fused_nodes, node_spec
from codegen.passes import optimize
from codegen.rules import lower_node
from codegen.schedule import Plan, check_plan, make_plan
from codegen.targets import Target, get_target

SAMPLE_ELEMENTS = 1 << 24  # the size report() shows block dim and tile size for
_DTYPE_TAGS = {"float32": "F32", "float16": "F16", "bfloat16": "Bf16"}


def kernel_for_spec(spec: NodeSpec) -> Kernel:
    """Lower one fused node (as NodeSpec) and run the generic passes."""
    return optimize(lower_node(spec))


def kernel_for_node(model: onnx.ModelProto, node: onnx.NodeProto, tables: ModelTables | None = None) -> Kernel:
    return kernel_for_spec(node_spec(model, node, tables))


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
    def variant(self) -> str:
        """8 hex digits of the IR text's SHA-256: the same IR gives the same name everywhere."""
        return hashlib.sha256(self.ir_text.encode()).hexdigest()[:8]

    @property
    def op_name(self) -> str:
        """CamelCase op type of the emitted custom op, e.g. SmoothL1LossGradV2F16K1a2b3c4d."""
        return f"{self.kernel.op_type}{_DTYPE_TAGS[self.kernel.dtype]}K{self.variant}"

    @property
    def file_stem(self) -> str:
        """snake_case of op_name: the project directory, file names and kernel entry name."""
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
        """Write the AscendC project to kernels_dir/<file_stem>/ and return the files written."""
        return emit_project(self, Path(kernels_dir))


def _exact(value: object) -> object:
    """A dict-key form of an attribute or constant that keeps apart what compares equal in
    Python but lowers differently: 0.0 and -0.0, and NaNs (float.hex spells them)."""
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, (list, tuple)):
        return tuple(_exact(v) for v in value)
    return (type(value).__name__, value)


def spec_key(spec: NodeSpec) -> tuple:
    """Everything of a node the lowering rules read, i.e. all of it but its name."""
    inputs = tuple(
        (role, i.dtype, i.shape, None if i.const is None else i.const.hex())
        for role, i in spec.inputs.items()
    )
    attrs = tuple(sorted((k, _exact(v)) for k, v in spec.attrs.items()))
    return spec.op_type, inputs, attrs


def build_kernels(model: onnx.ModelProto, target: str) -> list[KernelArtifact]:
    """One artifact per distinct kernel of the model's fused nodes, in first-use order."""
    tgt = get_target(target)
    by_key: dict[tuple, str] = {}
    by_text: dict[str, tuple[Kernel, list[str]]] = {}
    tables = ModelTables(model)
    for node in fused_nodes(model):
        spec = node_spec(model, node, tables)
        key = spec_key(spec)
        text = by_key.get(key)
        if text is None:
            kernel = kernel_for_spec(spec)
            text = by_key[key] = format_kernel(kernel)
            by_text.setdefault(text, (kernel, []))
        by_text[text][1].append(node.name)
    return [
        KernelArtifact(kernel, tgt, tuple(names), allocate(kernel))
        for kernel, names in by_text.values()
    ]


def emit_kernels(artifacts: list[KernelArtifact], kernels_dir: str | Path) -> list[Path]:
    paths: list[Path] = []
    for art in artifacts:
        paths += art.emit(kernels_dir)
    return paths


def format_ir(artifacts: list[KernelArtifact]) -> str:
    """What `lower MODEL --emit ir` prints: each kernel's IR under a comment naming its nodes."""
    blocks = []
    for art in artifacts:
        nodes = ", ".join(safe_text(n) for n in art.nodes)
        blocks.append(f"# {art.file_stem} ({art.target.name}) serves: {nodes}\n{art.ir_text}")
    return "\n".join(blocks)
