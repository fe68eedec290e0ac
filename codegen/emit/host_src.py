"""op_host/ sources: OpDef, InferShape/InferDataType and the tiling function of one operator.

The OpDef has CANN's op name, inputs, outputs and attributes (codegen/op_interface.py) and every
dtype combination of the project's variants. The tiling function recomputes the variant from the
call (attributes, input dtypes, dout's element count: codegen/variants.py), refuses a call no
variant serves with a logged reason, computes the variant's host scalars (attributes, 1/numel)
into the tiling data and runs codegen/schedule.py's make_plan in C++ with the variant's
constants (bytes per 256 tile elements, fixed scratch) and the target's UB and core count, so
host and Python compute the same plan. A variant with broadcast inputs also gets each one's
layout (codegen/broadcast.py) from the call's shapes, and its UB cost in the plan. The sources
are C++11: the op build compiles them so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.broadcast import MAX_GATHER_TILE, MAX_RANK, OFFSET_BYTES
from codegen.emit.cxx import BANNER, GE_TYPES, host_float_literal, input_index, scalar_expr
from codegen.emit.kernel_src import (
    broadcast_names,
    broadcast_slots,
    broadcast_struct,
    host_scalars,
    key_names,
    tiling_struct,
)
from codegen.ir import DTYPE_BYTES, Kind, Op, format_instr, is_attr, scalar_stages
from codegen.names import lower_camel
from codegen.op_interface import contract, interface
from codegen.registry import (
    FINITE_ATTR,
    INPUT_SHAPE,
    ONE_ATTR,
    ONE_ELEMENT,
    SHAPE_KINDS,
    STRING_ATTR,
    ZERO_ATTR,
    Axis,
)
from codegen.schedule import (
    CORE_ALIGN,
    TILE_ALIGN,
    UB_RESERVE_BYTES,
    VARIANT_SHIFT,
    fixed_bytes,
    tile_block_bytes,
)
from codegen.variants import FLOAT_DTYPES, axes_of

if TYPE_CHECKING:
    from codegen.artifact import KernelArtifact
    from codegen.project import OperatorProject

_ATTR_TYPES = {"float": "Float", "string": "String", "bool": "Bool"}


def _attr_default(kind: str, value: object) -> str:
    if kind == "string":
        return f'"{value}"'
    if kind == "bool":
        return "true" if value else "false"
    return host_float_literal(float(value))  # type: ignore[arg-type]


def _dtype_combos(project: OperatorProject) -> list[tuple[str, ...]]:
    """The (input dtypes..., output dtypes...) combinations of the variants, first-seen order."""
    combos: list[tuple[str, ...]] = []
    for art in project.variants:
        k = art.kernel
        combo = tuple(p.dtype for p in k.inputs + k.outputs)
        if combo not in combos:
            combos.append(combo)
    return combos


def def_cpp(project: OperatorProject) -> str:
    k = project.variants[0].kernel
    op = project.op_name
    iface = interface(op)
    if iface.dtypes:  # CANN's prototype: its dtype list, for every input and output alike
        combos = [(d,) * (len(k.inputs) + len(k.outputs)) for d in iface.dtypes]
        what = [f"// Op definition of {op}: CANN's ops-nn prototype (inputs, outputs, attributes and",
                "// dtypes), exactly; a call of a dtype or variant this package lacks fails at tiling."]
    else:
        combos = _dtype_combos(project)
        what = [f"// Op definition of {op}, the project's own operator: its inputs, outputs and",
                "// attributes, every dtype combination this package's kernels take."]
    lines = [
        f"// {BANNER}",
        *what,
        "#include <cmath>",
        '#include "register/op_def_registry.h"',
        "",
        "namespace ops {",
        f"class {op} : public OpDef {{",
        "public:",
        f"    explicit {op}(const char* name) : OpDef(name)",
        "    {",
    ]
    for n, p in enumerate(k.inputs):
        types = ", ".join(GE_TYPES[c[n]] for c in combos)
        lines += [
            f'        this->Input("{p.name}")',
            "            .ParamType(REQUIRED)",
            f"            .DataType({{{types}}})",
            f"            .Format({{{', '.join(['ge::FORMAT_ND'] * len(combos))}}})",
            f"            .UnknownShapeFormat({{{', '.join(['ge::FORMAT_ND'] * len(combos))}}})",
            "            .AutoContiguous();",
        ]
    for n, name in enumerate(iface.outputs):
        types = ", ".join(GE_TYPES[c[len(k.inputs) + n]] for c in combos)
        lines += [
            f'        this->Output("{name}")',
            "            .ParamType(REQUIRED)",
            f"            .DataType({{{types}}})",
            f"            .Format({{{', '.join(['ge::FORMAT_ND'] * len(combos))}}})",
            f"            .UnknownShapeFormat({{{', '.join(['ge::FORMAT_ND'] * len(combos))}}});",
        ]
    for a in iface.attributes:
        lines.append(
            f'        this->Attr("{a.name}").AttrType(OPTIONAL).{_ATTR_TYPES[a.kind]}'
            f"({_attr_default(a.kind, a.default)});"
        )
    lines += [
        "        OpAICoreConfig aicoreConfig;",
        "        aicoreConfig.DynamicCompileStaticFlag(true)",
        "            .DynamicRankSupportFlag(true)",
        "            .DynamicShapeSupportFlag(true)",
        "            .NeedCheckSupportFlag(false);",
        f'        this->AICore().AddConfig("{project.target.compute_unit}", aicoreConfig);',
        "    }",
        "};",
        "",
        f"OP_ADD({op});",
        "}  // namespace ops",
        "",
    ]
    return "\n".join(lines)


def _broadcasts(op: str) -> bool:
    """Whether an input of the op may broadcast to input 0's shape (an axis with a broadcast value)."""
    return any(a.source == INPUT_SHAPE and "broadcast" in a.values for a in axes_of(op))


def _infer_shape_body(project: OperatorProject) -> list[str]:
    """InferShape's body: input 0's shape, or the inputs' broadcast shape when the op broadcasts."""
    if not _broadcasts(project.op_name):
        return [
            "    const gert::Shape* in = context->GetInputShape(0);",
            "    gert::Shape* out = context->GetOutputShape(0);",
            "    if (in == nullptr || out == nullptr) {",
            "        return ge::GRAPH_FAILED;",
            "    }",
            "    *out = *in;",
            "    return ge::GRAPH_SUCCESS;",
        ]
    n_inputs = len(project.variants[0].kernel.inputs)
    return [
        "    gert::Shape* out = context->GetOutputShape(0);",
        "    if (out == nullptr) {",
        "        return ge::GRAPH_FAILED;",
        "    }",
        "    size_t rank = 0;",
        f"    int64_t dims[{MAX_RANK}] = {{0}};",
        f"    for (size_t i = 0; i < {n_inputs}; ++i) {{",
        "        const gert::Shape* in = context->GetInputShape(i);",
        f"        if (in == nullptr || in->GetDimNum() > {MAX_RANK}) {{",
        "            return ge::GRAPH_FAILED;",
        "        }",
        "        const size_t r = in->GetDimNum();",
        "        // right-aligned: dim k of `in` meets dim k + (rank - r) of the shape so far",
        "        if (r > rank) {",
        f"            int64_t grown[{MAX_RANK}] = {{0}};",
        "            for (size_t k = 0; k < r; ++k) {",
        "                grown[k] = k < r - rank ? 1 : dims[k - (r - rank)];",
        "            }",
        "            for (size_t k = 0; k < r; ++k) {",
        "                dims[k] = grown[k];",
        "            }",
        "            rank = r;",
        "        }",
        "        for (size_t k = 0; k < r; ++k) {",
        "            const int64_t d = in->GetDim(k);",
        "            int64_t& o = dims[k + (rank - r)];",
        "            if (o == 1 || o == d) {",
        "                o = d;",
        "            } else if (d != 1) {",
        "                return ge::GRAPH_FAILED;",
        "            }",
        "        }",
        "    }",
        "    out->SetDimNum(rank);",
        "    for (size_t k = 0; k < rank; ++k) {",
        "        out->SetDim(k, dims[k]);",
        "    }",
        "    return ge::GRAPH_SUCCESS;",
    ]


def infershape_cpp(project: OperatorProject) -> str:
    op = project.op_name
    what = ([f"// {op}: the output has the broadcast shape of the inputs (numpy rules, rank <= {MAX_RANK})",
             "// and the dtype of input 0. The kernels broadcast the other inputs to input 0's shape, so",
             "// the tiling function refuses a call whose broadcast shape is not input 0's."]
            if _broadcasts(op) else
            [f"// {op}: the output has the shape and dtype of input 0 (no broadcasting: the",
             "// tiling function refuses streamed inputs of another element count)."])
    return "\n".join(
        [
            f"// {BANNER}",
            *what,
            '#include "register/op_impl_registry.h"',
            "",
            "namespace ops {",
            f"static ge::graphStatus InferShape{op}(gert::InferShapeContext* context)",
            "{",
            *_infer_shape_body(project),
            "}",
            "",
            f"static ge::graphStatus InferDataType{op}(gert::InferDataTypeContext* context)",
            "{",
            "    context->SetOutputDataType(0, context->GetInputDataType(0));",
            "    return ge::GRAPH_SUCCESS;",
            "}",
            "",
            f"IMPL_OP_INFERSHAPE({op})",
            f"    .InferShape(InferShape{op})",
            f"    .InferDataType(InferDataType{op});",
            "}  // namespace ops",
            "",
        ]
    )


def _axis_lines(project: OperatorProject) -> list[str]:
    """C++ that sets `code` to the call's variant code, or fails naming what is unsupported."""
    op = project.op_name
    k = project.variants[0].kernel
    attr_index = {a.name: n for n, a in enumerate(interface(op).attributes)}
    lines = ["    uint64_t code = 0;", "    uint64_t weight = 1;"]

    declared: set[str] = set()

    def attr_float(name: str, check: str, why: str) -> list[str]:
        """The attribute read and checked once, however many axes read it."""
        if name in declared:
            return []
        declared.add(name)
        var = lower_camel(name)
        return [
            f"    const float* {var} = attrs->GetFloat({attr_index[name]});",
            f"    if ({var} == nullptr{check}) {{",
            f'        return Refuse("{op}", "{why}");',
            "    }",
        ]

    minimum = {a.name: a.minimum for a in contract(op).attr_specs if a.minimum is not None}

    def float_check(name: str) -> str:
        if name not in minimum:
            return ""
        var = lower_camel(name)
        return f" || !(*{var} >= {minimum[name]!r}f)"

    def float_why(name: str) -> str:
        return f"{name} must be a number >= {minimum[name]:g}" if name in minimum else f"{name} is missing"

    for axis in axes_of(op):
        name, reads = axis.name, axis.reads
        index = f"{lower_camel(name)}Index"
        var = lower_camel(reads)
        can_fail = False
        if axis.source == ONE_ELEMENT:
            expr = f"ShapeSize(context, {input_index(k, reads)}) == 1 ? 1 : 0"
        elif axis.source == STRING_ATTR:
            values = f"{lower_camel(name)}Values"
            quoted = ", ".join(f'"{v}"' for v in axis.values)
            lines.append(f"    static const char* const {values}[] = {{{quoted}}};")
            expr = f"StringIndex(attrs->GetStr({attr_index[reads]}), {values}, {len(axis.values)})"
            can_fail = True
        elif axis.source in (ZERO_ATTR, ONE_ATTR, FINITE_ATTR):
            lines += attr_float(reads, float_check(reads), float_why(reads))
            expr = {ZERO_ATTR: f"*{var} == 0.0f ? 1 : 0", ONE_ATTR: f"*{var} == 1.0f ? 0 : 1",
                    FINITE_ATTR: f"std::isfinite(*{var}) ? 1 : 0"}[axis.source]
        elif axis.source == INPUT_SHAPE:
            kinds = f"{lower_camel(name)}Kinds"
            table = ", ".join(str(axis.values.index(v)) if v in axis.values else "-1" for v in SHAPE_KINDS)
            scalar = "true" if "scalar" in axis.values else "false"
            kind = f"{lower_camel(name)}Kind"
            lines += [f"    static const int64_t {kinds}[] = {{{table}}};  // {', '.join(SHAPE_KINDS)} -> value",
                      f"    const int64_t {kind} = ShapeKind(context, {input_index(k, reads)}, {scalar});"]
            expr = f"{lower_camel(name)}Kind < 0 ? -1 : {kinds}[{lower_camel(name)}Kind]"
            can_fail = True
        else:  # INPUT_DTYPE
            expr = f"DtypeIndex(context, {input_index(k, reads)})"
            can_fail = True
        lines.append(f"    const int64_t {index} = {expr};")
        if can_fail:
            lines += [
                f"    if ({index} < 0) {{",
                f'        return Refuse("{op}", "{name}: no kernel for this value (one of '
                f'{", ".join(axis.values)})");',
                "    }",
            ]
        if axis in _widened_axes(op):
            wide = axis.values.index("broadcast")
            lines.append(f"    const uint64_t {lower_camel(name)}Widen = "
                         f"static_cast<uint64_t>({wide} - {index}) * weight;")
        lines += [
            f"    code += static_cast<uint64_t>({index}) * weight;",
            f"    weight *= {len(axis.values)};",
        ]
    return lines


def _widened_axes(op: str) -> list[Axis]:
    """Axes whose input a broadcast load can read whatever its kind: a package built for shapes
    known only at run time may hold the broadcast variant of a call whose input turns out to have
    input 0's element count (or one element), and that variant computes the same values."""
    return [a for a in axes_of(op) if a.source == INPUT_SHAPE and "broadcast" in a.values]


def _variant_search(op: str) -> list[str]:
    """C++ that finds the call's variant: its own first, then the ones that read inputs of the
    widened axes by broadcast loads (every subset of them, fewest first)."""
    widened = [f"{lower_camel(a.name)}Widen" for a in _widened_axes(op)]
    lines = ["    const Variant* variant = nullptr;"]
    if widened:
        lines += [
            f"    const uint64_t widen[] = {{{', '.join(widened)}}};",
            f"    for (uint32_t mask = 0; variant == nullptr && mask < {1 << len(widened)}u; ++mask) {{",
            "        uint64_t widened = code;",
            f"        for (uint32_t i = 0; i < {len(widened)}u; ++i) {{",
            "            widened += (mask >> i & 1u) ? widen[i] : 0u;",
            "        }",
            "        const uint64_t keyBase = static_cast<uint64_t>(dtypeCode) | widened << VARIANT_SHIFT;",
        ]
        indent = "        "
    else:
        lines.append("    const uint64_t keyBase = static_cast<uint64_t>(dtypeCode) | code << VARIANT_SHIFT;")
        indent = "    "
    lines += [
        f"{indent}for (const Variant& v : VARIANTS) {{",
        f"{indent}    if (v.keyBase == keyBase) {{",
        f"{indent}        variant = &v;",
        f"{indent}    }}",
        f"{indent}}}",
    ]
    if widened:
        lines.append("    }")
    return lines


def _host_scalar_function(project: OperatorProject, art: KernelArtifact) -> list[str]:
    """`static bool HostScalars<tag>(context, attrs, td)`: the variant's host scalars."""
    k = art.kernel
    stages = scalar_stages(k)
    ref = {i: f"h{i}" for i in stages}
    attr_index = {a.name: n for n, a in enumerate(interface(project.op_name).attributes)}
    wanted = host_scalars(art)
    needed = set(wanted)
    for i in sorted(needed, reverse=True):
        needed.update(k.instrs[i].srcs)
    lines = [
        f"bool HostScalars{art.variant_tag}(gert::TilingContext* context, const gert::RuntimeAttrs* attrs,",
        f"                    {tiling_struct(project)}* td)",
        "{",
        "    (void)context;",
        "    (void)attrs;",
    ]
    for i, ins in enumerate(k.instrs):
        if i not in needed:
            continue
        if is_attr(ins):
            name = str(ins.attr("attr"))
            lines += [
                f"    const float* a{i} = attrs->GetFloat({attr_index[name]});",
                f"    if (a{i} == nullptr) {{",
                "        return false;",
                "    }",
            ]
            expr = f"*a{i}"
        elif ins.op is Op.SCONST:
            expr = host_float_literal(float(ins.attr("value")))  # type: ignore[arg-type]
        elif ins.op is Op.SNUMEL:
            expr = f"static_cast<float>(ShapeSize(context, {input_index(k, str(ins.attr('name')))}))"
        else:
            expr = scalar_expr(ins, ref)
        lines.append(f"    const float h{i} = {expr};  // {format_instr(k, i)}")
    lines += [f"    td->scalars[{n}] = h{i};" for n, i in enumerate(wanted)]
    lines += ["    return true;", "}", ""]
    return lines


def _variant_row(project: OperatorProject, art: KernelArtifact) -> str:
    k = art.kernel
    streamed = sum(1 << n for n, p in enumerate(k.inputs) if p.kind is Kind.TILE)
    broadcast = sum(1 << n for n, p in enumerate(k.inputs) if p.broadcast)
    extra = ""
    if broadcast_slots(project):
        sizes = [DTYPE_BYTES[k.param(name).dtype] for name in broadcast_names(art)]
        sizes += [0] * (broadcast_slots(project) - len(sizes))
        extra = f"{broadcast}u, {{{', '.join(map(str, sizes))}}}, "
    return (
        f"    {{{key_names(project, art)[0]}, {tile_block_bytes(art.allocation, 1)}, "
        f"{tile_block_bytes(art.allocation, 2)}, {fixed_bytes(k, art.target)}, {streamed}u, {extra}"
        f"HostScalars{art.variant_tag}}},  // {art.variant_label}"
    )


def _shape_functions() -> list[str]:
    """BroadcastsTo and ShapeKind: how an input's shape meets input 0's (INPUT_SHAPE axes)."""
    return [
        f"constexpr int64_t MAX_RANK = {MAX_RANK};",
        "",
        "// numpy's rule: `in` right-aligned against `out`, each dim equal or 1",
        "bool BroadcastsTo(const gert::Shape& in, const gert::Shape& out)",
        "{",
        "    const size_t r = in.GetDimNum();",
        "    const size_t ro = out.GetDimNum();",
        "    if (r > ro || ro > static_cast<size_t>(MAX_RANK)) {",
        "        return false;",
        "    }",
        "    for (size_t k = 0; k < r; ++k) {",
        "        const int64_t d = in.GetDim(r - 1 - k);",
        "        if (d != 1 && d != out.GetDim(ro - 1 - k)) {",
        "            return false;",
        "        }",
        "    }",
        "    return true;",
        "}",
        "",
        "// How input `index` meets input 0: 0 its element count, 1 one element (when `scalar`),",
        "// 2 another shape that broadcasts to it, -1 none (codegen/registry.py SHAPE_KINDS)",
        "int64_t ShapeKind(gert::TilingContext* context, int32_t index, bool scalar)",
        "{",
        "    const gert::StorageShape* in = context->GetInputShape(index);",
        "    const gert::StorageShape* out = context->GetInputShape(0);",
        "    if (in == nullptr || out == nullptr || !BroadcastsTo(in->GetStorageShape(), out->GetStorageShape())) {",
        "        return -1;",
        "    }",
        "    const int64_t n = ShapeSize(context, index);",
        "    if (scalar && n == 1) {",
        "        return 1;",
        "    }",
        "    return n == ShapeSize(context, 0) ? 0 : 2;",
        "}",
        "",
    ]


def _broadcast_functions(project: OperatorProject) -> list[str]:
    """C++ of codegen/broadcast.py and of the UB arithmetic make_plan does with broadcasts."""
    b = broadcast_struct(project)
    return [
        f"constexpr int64_t OFFSET_BYTES = {OFFSET_BYTES};  // Gather's offsets are uint32 byte offsets",
        f"constexpr int64_t MAX_GATHER_TILE = {MAX_GATHER_TILE};  // Gather's repeats fit a uint8",
        f"constexpr int64_t BROADCASTS = {broadcast_slots(project)};",
        "",
        "int64_t Round32(int64_t n) { return (n + 31) / 32 * 32; }",
        "",
        "// The layout of input `index` read at every element of input 0 (codegen/broadcast.py layout)",
        f"bool Layout(gert::TilingContext* context, int32_t index, {b}* b)",
        "{",
        "    const gert::StorageShape* inShape = context->GetInputShape(index);",
        "    const gert::StorageShape* outShape = context->GetInputShape(0);",
        "    if (inShape == nullptr || outShape == nullptr ||",
        "        !BroadcastsTo(inShape->GetStorageShape(), outShape->GetStorageShape())) {",
        "        return false;",
        "    }",
        "    const gert::Shape& in = inShape->GetStorageShape();",
        "    const gert::Shape& out = outShape->GetStorageShape();",
        "    const size_t ro = out.GetDimNum();",
        "    const size_t lead = ro - in.GetDimNum();",
        "    int64_t stride[MAX_RANK] = {0};",
        "    int64_t step = 1;",
        "    for (size_t k = ro; k-- > 0;) {",
        "        const int64_t d = k < lead ? 1 : in.GetDim(k - lead);",
        "        stride[k] = d != 1 ? step : 0;",
        "        step *= d;",
        "    }",
        "    std::memset(b, 0, sizeof(*b));",
        "    for (size_t k = 0; k < ro; ++k) {",
        "        const int64_t o = out.GetDim(k);",
        "        if (o == 1) {",
        "            continue;",
        "        }",
        "        // the outer dim walks the input as the inner one continued would: one dim",
        "        if (b->rank > 0 && b->strides[b->rank - 1] == stride[k] * o) {",
        "            b->dims[b->rank - 1] *= o;",
        "            b->strides[b->rank - 1] = stride[k];",
        "            continue;",
        "        }",
        "        b->dims[b->rank] = o;",
        "        b->strides[b->rank] = stride[k];",
        "        ++b->rank;",
        "    }",
        "    if (b->rank == 0) {",
        "        b->rank = 1;",
        "        b->dims[0] = 1;",
        "    }",
        "    b->period = 1;",
        "    for (int64_t k = 1; k < b->rank; ++k) {",
        "        b->period *= b->dims[k];",
        "    }",
        "    b->shift = b->strides[0];",
        "    b->inputElems = step;",
        "    return true;",
        "}",
        "",
        "// Whether the period table takes at most a quarter of the UB budget (else the general path)",
        f"bool Tabled(const {b}& b, int64_t budget)",
        "{",
        "    return Round32(b.period * OFFSET_BYTES) <= (budget > 0 ? budget : 0) / 4;",
        "}",
        "",
        "// Input elements one tile of `tile` elements may read, clipped at the input's end",
        f"int64_t WindowElems(const {b}& b, int64_t tile)",
        "{",
        "    int64_t last = 0;",
        "    for (int64_t k = 1; k < b.rank; ++k) {",
        "        last += (b.dims[k] - 1) * b.strides[k];",
        "    }",
        "    const int64_t w = (b.period + tile - 1) / b.period * b.shift + last + 1;",
        "    return w < b.inputElems ? w : b.inputElems;",
        "}",
        "",
    ]


def _broadcast_plan_functions(project: OperatorProject) -> list[str]:
    """PlanBytes and MaxTile: codegen/schedule.py's _buffers sum and max_tile with broadcasts."""
    b = broadcast_struct(project)
    return [
        "// UB bytes of every buffer for a tile: the kernel's slots, then the broadcast buffers",
        f"int64_t PlanBytes(const Variant& v, const {b}* b, int64_t nb, int64_t tile, int64_t bufferNum,",
        "                  int64_t budget)",
        "{",
        "    int64_t bytes = (bufferNum == 1 ? v.tileBlockSingle : v.tileBlockDouble) * (tile / TILE_ALIGN);",
        "    int64_t tabled = 0;",
        "    for (int64_t i = 0; i < nb; ++i) {",
        "        if (!Tabled(b[i], budget)) {",
        "            continue;  // the general path: no UB beyond the tile",
        "        }",
        "        ++tabled;",
        "        // the window's buffer holds no fewer elements than a Gather's count",
        "        const int64_t window = WindowElems(b[i], tile) > tile ? WindowElems(b[i], tile) : tile;",
        "        bytes += Round32((b[i].period + tile) * OFFSET_BYTES) +",
        "            bufferNum * Round32(window * v.broadcastBytes[i]);",
        "    }",
        "    return bytes + (tabled > 0 ? 2 * Round32(tile * OFFSET_BYTES) : 0);  // the shared iota and offsets",
        "}",
        "",
        "// The largest multiple of TILE_ALIGN whose buffers fit in `budget` bytes (0: none)",
        f"int64_t MaxTile(const Variant& v, const {b}* b, int64_t nb, int64_t budget, int64_t bufferNum)",
        "{",
        "    int64_t room = budget > 0 ? budget : 0;",
        "    int64_t tabled = 0;",
        "    for (int64_t i = 0; i < nb; ++i) {",
        "        if (Tabled(b[i], budget)) {",
        "            ++tabled;",
        "            room -= Round32(b[i].period * OFFSET_BYTES);",
        "        }",
        "    }",
        "    const int64_t per = (bufferNum == 1 ? v.tileBlockSingle : v.tileBlockDouble) +",
        "        (tabled > 0 ? (2 + tabled) * OFFSET_BYTES * TILE_ALIGN : 0);",
        "    int64_t tile = room > 0 ? room / per * TILE_ALIGN : 0;",
        "    if (tabled > 0 && tile > MAX_GATHER_TILE) {",
        "        tile = MAX_GATHER_TILE;  // Gather's repeats fit a uint8",
        "    }",
        "    while (tile > 0 && PlanBytes(v, b, nb, tile, bufferNum, budget) > budget) {",
        "        tile -= TILE_ALIGN;",
        "    }",
        "    return tile;",
        "}",
        "",
    ]


def tiling_cpp(project: OperatorProject) -> str:
    op, t = project.op_name, project.target
    k = project.variants[0].kernel
    struct = tiling_struct(project)
    n_inputs = len(k.inputs)
    lines = [
        f"// {BANNER}",
        f"// Tiling of {op} for {t.name}: picks the variant the call needs, then the same plan",
        "// as codegen/schedule.py.",
        "#include <cmath>",
        "#include <cstdint>",
        "#include <cstdio>",
        "#include <cstring>",
        '#include "register/op_def_registry.h"',
        '#include "tiling/platform/platform_ascendc.h"',
        f'#include "../op_kernel/{project.file_stem}_tiling_data.h"',
        f'#include "../op_kernel/{project.file_stem}_tiling_key.h"',
        "",
        "namespace optiling {",
        "namespace {",
        f"constexpr int64_t CORE_ALIGN = {CORE_ALIGN};  // elements per core block (32-byte multiple)",
        f"constexpr int64_t TILE_ALIGN = {TILE_ALIGN};  // tile granule: whole 32-byte mask blocks",
        f"constexpr int64_t TARGET_UB_BYTES = {t.ub_bytes};",
        f"constexpr int64_t UB_RESERVE_BYTES = {UB_RESERVE_BYTES};  // left unplanned, as ops-nn keeps",
        f"constexpr int64_t TARGET_CORES = {t.aiv_cores};",
        f"constexpr int32_t INPUTS = {n_inputs};",
        f"constexpr uint64_t VARIANT_SHIFT = {VARIANT_SHIFT};",
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
        "",
        "ge::graphStatus Refuse(const char* op, const char* why)",
        "{",
        '    std::fprintf(stderr, "[ERROR] %s tiling: %s\\n", op, why);',
        "    return ge::GRAPH_FAILED;",
        "}",
        "",
        "int64_t StringIndex(const char* value, const char* const* values, int64_t count)",
        "{",
        "    for (int64_t i = 0; value != nullptr && i < count; ++i) {",
        "        if (std::strcmp(value, values[i]) == 0) {",
        "            return i;",
        "        }",
        "    }",
        "    return -1;",
        "}",
        "",
        "// ops-nn dtype codes (DT_FLOAT 0, DT_FLOAT16 1, DT_BF16 27), -1 for others",
        "int64_t DtypeCode(ge::DataType dtype)",
        "{",
        "    switch (dtype) {",
        "        case ge::DT_FLOAT: return 0;",
        "        case ge::DT_FLOAT16: return 1;",
        "        case ge::DT_BF16: return 27;",
        "        default: return -1;",
        "    }",
        "}",
        "",
        f"// index in ({', '.join(FLOAT_DTYPES)}), -1 for others",
        "int64_t DtypeIndex(gert::TilingContext* context, int32_t index)",
        "{",
        "    const auto* desc = context->GetInputDesc(index);",
        "    if (desc == nullptr) {",
        "        return -1;",
        "    }",
        "    switch (desc->GetDataType()) {",
        *[
            f"        case {GE_TYPES[d]}: return {n};"
            for n, d in enumerate(FLOAT_DTYPES)
        ],
        "        default: return -1;",
        "    }",
        "}",
        "",
    ]
    for art in project.variants:
        lines += _host_scalar_function(project, art)
    bcast = broadcast_slots(project) > 0
    if any(axis.source == INPUT_SHAPE for axis in axes_of(op)):
        lines += _shape_functions()
    if bcast:
        lines += _broadcast_functions(project)
    lines += [
        "struct Variant {",
        "    uint64_t keyBase;           // tiling key with single buffering",
        "    int64_t tileBlockSingle;    // UB bytes per TILE_ALIGN tile elements, single buffering",
        "    int64_t tileBlockDouble;    // the same, double buffering",
        "    int64_t fixedBytes;         // Sign temp + Select temp space",
        "    uint32_t streamedInputs;    // bit i: input i is streamed (else one element)",
        *(["    uint32_t broadcastInputs;   // bit i: input i is streamed by a broadcast load",
           "    int64_t broadcastBytes[BROADCASTS];  // element bytes of each broadcast input, in order"]
          if bcast else []),
        f"    bool (*hostScalars)(gert::TilingContext*, const gert::RuntimeAttrs*, {struct}*);",
        "};",
        "",
        "const Variant VARIANTS[] = {",
        *[_variant_row(project, art) for art in project.variants],
        "};",
        *(["", *_broadcast_plan_functions(project)] if bcast else []),
        "}  // namespace",
        "",
        f"struct {op}CompileInfo {{}};",
        "",
        f"static ge::graphStatus {op}TilingFunc(gert::TilingContext* context)",
        "{",
        "    const gert::RuntimeAttrs* attrs = context->GetAttrs();",
        "    const auto* desc = context->GetInputDesc(0);",
        "    if (attrs == nullptr || desc == nullptr) {",
        f'        return Refuse("{op}", "no attributes or input description");',
        "    }",
        "    const int64_t dtypeCode = DtypeCode(desc->GetDataType());",
        "    if (dtypeCode < 0) {",
        f'        return Refuse("{op}", "dtype is not float32, float16 or bfloat16");',
        "    }",
        *_axis_lines(project),
        *_variant_search(op),
        "    if (variant == nullptr) {",
        f'        return Refuse("{op}", "this package has no kernel for the call\'s dtypes and '
        'attributes (README.md lists the variants it has)");',
        "    }",
        "",
        "    auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());",
        "    int64_t cores = static_cast<int64_t>(platform.GetCoreNumAiv());",
        "    uint64_t ubSize = 0;",
        "    platform.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ubSize);",
        "    if (cores <= 0 || ubSize == 0) {",
        f'        return Refuse("{op}", "the platform reports no vector cores or no UB");',
        "    }",
        "    cores = cores < TARGET_CORES ? cores : TARGET_CORES;",
        "    const int64_t ub = static_cast<int64_t>(ubSize) < TARGET_UB_BYTES ?",
        "        static_cast<int64_t>(ubSize) : TARGET_UB_BYTES;",
        "    const int64_t n = ShapeSize(context, 0);",
        "    if (n < 0) {",
        f'        return Refuse("{op}", "input 0 has no shape");',
        "    }",
        *([f"    {broadcast_struct(project)} layouts[BROADCASTS];", "    int64_t nb = 0;"] if bcast else []),
        "    for (int32_t i = 1; i < INPUTS; ++i) {",
        *(["        if (variant->broadcastInputs >> i & 1u) {",
           "            if (!Layout(context, i, &layouts[nb])) {",
           f'                return Refuse("{op}", "an input does not broadcast to input 0\'s shape (numpy rules, '
           f'rank <= {MAX_RANK}): this operator broadcasts its inputs to input 0\'s shape, never input 0");',
           "            }",
           "            ++nb;",
           "            continue;",
           "        }"] if bcast else []),
        "        const int64_t want = (variant->streamedInputs >> i & 1u) ? n : 1;",
        "        if (ShapeSize(context, i) != want) {",
        f'            return Refuse("{op}", "an input has neither input 0\'s element count nor one '
        + ('element nor a shape that broadcasts to input 0\'s as this variant needs");' if bcast else
           'element as this variant needs (no broadcasting)");'),
        "        }",
        "    }",
        f"    auto* td = context->GetTilingData<{struct}>();",
        "    if (td == nullptr) {",
        f'        return Refuse("{op}", "no tiling data buffer");',
        "    }",
        f"    std::memset(td, 0, sizeof({struct}));",
        "    td->numElements = n;",
        "    if (!variant->hostScalars(context, attrs, td)) {",
        f'        return Refuse("{op}", "an attribute the kernel reads is missing");',
        "    }",
        "    size_t* workspace = context->GetWorkspaceSizes(1);",
        "    if (workspace == nullptr) {",
        f'        return Refuse("{op}", "no workspace size slot");',
        "    }",
        "    workspace[0] = static_cast<size_t>(platform.GetLibApiWorkSpaceSize());",
        "    if (n == 0) {  // nothing to do: one core that returns at once",
        "        td->blockFactor = 0;",
        "        td->tileElems = 0;",
        "        context->SetBlockDim(1);",
        "        context->SetTilingKey(variant->keyBase);",
        "        return ge::GRAPH_SUCCESS;",
        "    }",
        "    const int64_t blockFactor = CeilDiv(CeilDiv(n, cores), CORE_ALIGN) * CORE_ALIGN;",
        "    const int64_t blockDim = CeilDiv(n, blockFactor);",
        "    const int64_t room = ub - UB_RESERVE_BYTES - variant->fixedBytes;",
        "    const int64_t budget = room > 0 ? room : 0;",
        *(["    const int64_t single = MaxTile(*variant, layouts, nb, budget, 1);",
           "    const int64_t dbl = MaxTile(*variant, layouts, nb, budget, 2);"] if bcast else
          ["    const int64_t single = budget / variant->tileBlockSingle * TILE_ALIGN;",
           "    const int64_t dbl = budget / variant->tileBlockDouble * TILE_ALIGN;"]),
        "    if (single == 0) {",
        f'        return Refuse("{op}", "one tile does not fit in UB'
        + (' (a broadcast input\'s period table takes 4 bytes per element of the output\'s inner dims)");'
           if bcast else '");'),
        "    }",
        "    const bool doubleBuffer = dbl > 0 && blockFactor > dbl;",
        "    const int64_t limit = doubleBuffer ? dbl : single;",
        "    const int64_t tiles = CeilDiv(blockFactor, limit);",
        "    td->blockFactor = blockFactor;",
        "    td->tileElems = CeilDiv(CeilDiv(blockFactor, tiles), TILE_ALIGN) * TILE_ALIGN;",
        *(["    for (int64_t i = 0; i < nb; ++i) {",
           "        td->broadcasts[i] = layouts[i];",
           "        if (Tabled(layouts[i], budget)) {  // else the general path: no table, no window",
           "            td->broadcasts[i].tableElems = layouts[i].period + td->tileElems;",
           "            td->broadcasts[i].windowElems = WindowElems(layouts[i], td->tileElems);",
           "        }",
           "    }"] if bcast else []),
        "    context->SetBlockDim(static_cast<uint32_t>(blockDim));",
        "    context->SetTilingKey(variant->keyBase | (doubleBuffer ? 0x100u : 0u));",
        "    return ge::GRAPH_SUCCESS;",
        "}",
        "",
        f"static ge::graphStatus {op}TilingParse(gert::TilingParseContext* context)",
        "{",
        "    (void)context;",
        "    return ge::GRAPH_SUCCESS;",
        "}",
        "",
        f"IMPL_OP_OPTILING({op})",
        f"    .Tiling({op}TilingFunc)",
        f"    .TilingParse<{op}CompileInfo>({op}TilingParse);",
        "}  // namespace optiling",
        "",
    ]
    return "\n".join(lines)

