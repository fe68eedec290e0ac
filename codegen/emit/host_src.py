"""op_host/ sources: OpDef, InferShape/InferDataType and the tiling function.

The tiling function is codegen/schedule.py's make_plan written in C++ with the kernel's
constants (bytes per 256 tile elements, fixed scratch, the target's UB and core count), so
host and Python compute the same plan; it also computes the host-stage scalars (those that
depend on a shape, e.g. 1/numel) into the tiling data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.emit.cxx import BANNER, GE_TYPES, float_literal, input_index, scalar_expr
from codegen.emit.kernel_src import host_scalars, key_names, tiling_struct
from codegen.ir import Kind, Op, format_instr, scalar_stages
from codegen.schedule import CORE_ALIGN, TILE_ALIGN, UB_RESERVE_BYTES, fixed_bytes, tile_block_bytes

if TYPE_CHECKING:
    from codegen.api import KernelArtifact


def def_cpp(art: KernelArtifact) -> str:
    k = art.kernel
    lines = [
        f"// {BANNER}",
        f"// Op definition of {art.op_name}: {k.op_type} for {k.dtype}.",
        '#include "register/op_def_registry.h"',
        "",
        "namespace ops {",
        f"class {art.op_name} : public OpDef {{",
        "public:",
        f"    explicit {art.op_name}(const char* name) : OpDef(name)",
        "    {",
    ]
    for p in k.inputs:
        lines += [
            f'        this->Input("{p.name}")',
            "            .ParamType(REQUIRED)",
            f"            .DataType({{{GE_TYPES[p.dtype]}}})",
            "            .Format({ge::FORMAT_ND})",
            "            .UnknownShapeFormat({ge::FORMAT_ND})",
            "            .AutoContiguous();",
        ]
    for p in k.outputs:
        lines += [
            f'        this->Output("{p.name}")',
            "            .ParamType(REQUIRED)",
            f"            .DataType({{{GE_TYPES[p.dtype]}}})",
            "            .Format({ge::FORMAT_ND})",
            "            .UnknownShapeFormat({ge::FORMAT_ND});",
        ]
    lines += [
        "        OpAICoreConfig aicoreConfig;",
        "        aicoreConfig.DynamicCompileStaticFlag(true)",
        "            .DynamicRankSupportFlag(true)",
        "            .DynamicShapeSupportFlag(true)",
        "            .NeedCheckSupportFlag(false)",
        f'            .ExtendCfgInfo("opFile.value", "{art.file_stem}");',
        f'        this->AICore().AddConfig("{art.target.compute_unit}", aicoreConfig);',
        "    }",
        "};",
        "",
        f"OP_ADD({art.op_name});",
        "}  // namespace ops",
        "",
    ]
    return "\n".join(lines)


def infershape_cpp(art: KernelArtifact) -> str:
    k = art.kernel
    first = next(i for i, p in enumerate(k.inputs) if p.kind is Kind.TILE)
    return "\n".join(
        [
            f"// {BANNER}",
            f"// The output has the shape and dtype of input {k.inputs[first].name}.",
            '#include "register/op_impl_registry.h"',
            "",
            "namespace ops {",
            f"static ge::graphStatus InferShape{art.op_name}(gert::InferShapeContext* context)",
            "{",
            f"    const gert::Shape* in = context->GetInputShape({first});",
            "    gert::Shape* out = context->GetOutputShape(0);",
            "    if (in == nullptr || out == nullptr) {",
            "        return ge::GRAPH_FAILED;",
            "    }",
            "    *out = *in;",
            "    return ge::GRAPH_SUCCESS;",
            "}",
            "",
            f"static ge::graphStatus InferDataType{art.op_name}(gert::InferDataTypeContext* context)",
            "{",
            f"    context->SetOutputDataType(0, context->GetInputDataType({first}));",
            "    return ge::GRAPH_SUCCESS;",
            "}",
            "",
            f"IMPL_OP_INFERSHAPE({art.op_name})",
            f"    .InferShape(InferShape{art.op_name})",
            f"    .InferDataType(InferDataType{art.op_name});",
            "}  // namespace ops",
            "",
        ]
    )


def _host_scalar_lines(art: KernelArtifact) -> list[str]:
    k = art.kernel
    stages = scalar_stages(k)
    ref = {i: f"h{i}" for i in stages}
    needed = set(host_scalars(art))
    for i in sorted(needed, reverse=True):
        needed.update(k.instrs[i].srcs)
    lines = []
    for i, ins in enumerate(k.instrs):
        if i not in needed:
            continue
        if ins.op is Op.SCONST:
            expr = float_literal(float(ins.attr("value")))  # type: ignore[arg-type]
        elif ins.op is Op.SNUMEL:
            expr = (
                f"static_cast<float>(ShapeSize(context, {input_index(k, str(ins.attr('name')))}))"
            )
        else:
            expr = scalar_expr(ins, ref)
        lines.append(f"    const float h{i} = {expr};  // {format_instr(k, i)}")
    lines += [f"    td->s{i} = h{i};" for i in host_scalars(art)]
    return lines


def tiling_cpp(art: KernelArtifact) -> str:
    k, t = art.kernel, art.target
    single, double = key_names(art)
    streamed = [i for i, p in enumerate(k.inputs) if p.kind is Kind.TILE]
    scalars = [i for i, p in enumerate(k.inputs) if p.kind is Kind.SCALAR]
    lines = [
        f"// {BANNER}",
        f"// Tiling of {art.op_name} for {t.name}: the same plan as codegen/schedule.py.",
        "#include <cstdint>",
        '#include "register/op_def_registry.h"',
        '#include "tiling/platform/platform_ascendc.h"',
        f'#include "../op_kernel/{art.file_stem}_tiling_data.h"',
        f'#include "../op_kernel/{art.file_stem}_tiling_key.h"',
        "",
        "namespace optiling {",
        "namespace {",
        f"constexpr int64_t CORE_ALIGN = {CORE_ALIGN};  // elements per core block (32-byte multiple)",
        f"constexpr int64_t TILE_ALIGN = {TILE_ALIGN};  // tile granule: whole 32-byte mask blocks",
        "// UB bytes per TILE_ALIGN tile elements over all buffers, single / double buffering",
        f"constexpr int64_t TILE_BLOCK_BYTES_SINGLE = {tile_block_bytes(art.allocation, 1)};",
        f"constexpr int64_t TILE_BLOCK_BYTES_DOUBLE = {tile_block_bytes(art.allocation, 2)};",
        f"constexpr int64_t FIXED_BYTES = {fixed_bytes(k, t)};  // Sign temp + Select temp space",
        f"constexpr int64_t TARGET_UB_BYTES = {t.ub_bytes};",
        f"constexpr int64_t UB_RESERVE_BYTES = {UB_RESERVE_BYTES};  // left unplanned, as ops-nn keeps",
        f"constexpr int64_t TARGET_CORES = {t.aiv_cores};",
        "",
        "int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }",
        "",
        "int64_t ShapeSize(gert::TilingContext* context, int32_t index)",
        "{",
        "    const gert::StorageShape* shape = context->GetInputShape(index);",
        "    if (shape == nullptr) {",
        "        return -1;",
        "    }",
        "    const gert::Shape& s = shape->GetStorageShape();",
        "    return s.GetDimNum() == 0 ? 1 : s.GetShapeSize();",
        "}",
        "}  // namespace",
        "",
        f"struct {art.op_name}CompileInfo {{}};",
        "",
        f"static ge::graphStatus {art.op_name}TilingFunc(gert::TilingContext* context)",
        "{",
        "    auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());",
        "    int64_t cores = static_cast<int64_t>(platform.GetCoreNumAiv());",
        "    uint64_t ubSize = 0;",
        "    platform.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ubSize);",
        "    if (cores <= 0 || ubSize == 0) {",
        "        return ge::GRAPH_FAILED;",
        "    }",
        "    cores = cores < TARGET_CORES ? cores : TARGET_CORES;",
        "    const int64_t ub = static_cast<int64_t>(ubSize) < TARGET_UB_BYTES ?",
        "        static_cast<int64_t>(ubSize) : TARGET_UB_BYTES;",
        f"    const int64_t n = ShapeSize(context, {streamed[0]});",
    ]
    for i in streamed[1:]:
        lines += [
            f"    if (ShapeSize(context, {i}) != n) {{  // {k.inputs[i].name}: same element count",
            "        return ge::GRAPH_FAILED;",
            "    }",
        ]
    for i in scalars:
        lines += [
            f"    if (ShapeSize(context, {i}) != 1) {{  // {k.inputs[i].name}: one element",
            "        return ge::GRAPH_FAILED;",
            "    }",
        ]
    lines += [
        "    if (n < 0) {",
        "        return ge::GRAPH_FAILED;",
        "    }",
        f"    auto* td = context->GetTilingData<{tiling_struct(art)}>();",
        "    if (td == nullptr) {",
        "        return ge::GRAPH_FAILED;",
        "    }",
        "    td->numElements = n;",
        *_host_scalar_lines(art),
        "    size_t* workspace = context->GetWorkspaceSizes(1);",
        "    workspace[0] = static_cast<size_t>(platform.GetLibApiWorkSpaceSize());",
        "    if (n == 0) {  // nothing to do: one core that returns at once",
        "        td->blockFactor = 0;",
        "        td->tileElems = 0;",
        "        context->SetBlockDim(1);",
        f"        context->SetTilingKey({single});",
        "        return ge::GRAPH_SUCCESS;",
        "    }",
        "    const int64_t blockFactor = CeilDiv(CeilDiv(n, cores), CORE_ALIGN) * CORE_ALIGN;",
        "    const int64_t blockDim = CeilDiv(n, blockFactor);",
        "    const int64_t budget = ub - UB_RESERVE_BYTES - FIXED_BYTES > 0 ? ub - UB_RESERVE_BYTES - FIXED_BYTES : 0;",
        "    const int64_t single = budget / TILE_BLOCK_BYTES_SINGLE * TILE_ALIGN;",
        "    const int64_t dbl = budget / TILE_BLOCK_BYTES_DOUBLE * TILE_ALIGN;",
        "    if (single == 0) {",
        "        return ge::GRAPH_FAILED;",
        "    }",
        "    const bool doubleBuffer = dbl > 0 && blockFactor > dbl;",
        "    const int64_t limit = doubleBuffer ? dbl : single;",
        "    const int64_t tiles = CeilDiv(blockFactor, limit);",
        "    td->blockFactor = blockFactor;",
        "    td->tileElems = CeilDiv(CeilDiv(blockFactor, tiles), TILE_ALIGN) * TILE_ALIGN;",
        "    context->SetBlockDim(static_cast<uint32_t>(blockDim));",
        f"    context->SetTilingKey(doubleBuffer ? {double} : {single});",
        "    return ge::GRAPH_SUCCESS;",
        "}",
        "",
        f"static ge::graphStatus {art.op_name}TilingParse(gert::TilingParseContext* context)",
        "{",
        "    (void)context;",
        "    return ge::GRAPH_SUCCESS;",
        "}",
        "",
        f"IMPL_OP_OPTILING({art.op_name})",
        f"    .Tiling({art.op_name}TilingFunc)",
        f"    .TilingParse<{art.op_name}CompileInfo>({art.op_name}TilingParse);",
        "}  // namespace optiling",
        "",
    ]
    return "\n".join(lines)
