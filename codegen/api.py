"""Public API of codegen: fused nodes -> kernels (IR + allocation) -> plans, reports, projects.

    kernel_for_node(model, node)           -> Kernel (lowered and optimised IR)
    build_kernels(model, target)           -> [KernelArtifact], one per distinct kernel variant
    artifact.schedule(num_elements)        -> Plan (checked)
    artifact.report()                      -> dict for report.json
    emit_kernels(artifacts, kernels_dir)   -> [Path] of one operator project per op type

A kernel variant is what codegen/variants.py names (dtype, reduction, dout kind, scalar form...);
the values a node carries (sigma, scale, shrink_max, the scalar inputs) are read at tiling or run
time. build_kernels keys each node by `node_key` (op type, variant, the shape facts the rules
check) and lowers each key once, so generation cost follows distinct kernels, not nodes. All
variants of one op type form one operator project (codegen/project.py) with CANN's op name.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from codegen.artifact import SAMPLE_ELEMENTS, KernelArtifact, structure_text
from codegen.buffers import allocate
from codegen.emit import emit_project
from codegen.ir import Kernel
from codegen.names import safe_text
from codegen.nodes import ModelTables, NodeSpec, node_spec, scoped_fused_nodes
from codegen.passes import optimize
from codegen.project import OperatorProject, operator_projects
from codegen.rules import lower_node, node_variant
from codegen.rules.common import same_shape
from codegen.target_passes import for_target
from codegen.targets import Target, get_target

__all__ = ["SAMPLE_ELEMENTS", "KernelArtifact", "artifact_for_target", "build_kernels", "emit_kernels", "format_ir",
           "kernel_for_node", "kernel_for_spec", "node_key", "projects", "structure_text"]

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
    """One artifact per distinct kernel variant of the model's fused nodes (also those inside
    If/Loop/Scan bodies), in first-use order; each node is lowered only when its node_key is new."""
    tgt = get_target(target)
    by_key: dict[tuple, str] = {}
    by_text: dict[str, tuple[Kernel, list[str]]] = {}
    for node, tables in scoped_fused_nodes(model):
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
        paths += emit_project(project, Path(kernels_dir))
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
