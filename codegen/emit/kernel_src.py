"""op_kernel/ sources: tiling data and key headers, the pipeline classes, the kernel entry.

One operator holds every variant of its op type (codegen/variants.py): `<op>.h` has one
pipeline class per variant, each in its own namespace, and the entry in `<op>.cpp` runs the one
whose tiling key the host set. The pipeline is the classic AscendC CopyIn -> Compute -> CopyOut
loop over a core's tiles with
TQue queues (buffer_num 1 or 2 chosen by the tiling key). Compute is written from the IR: one
AscendC call per IR tile instruction, on the UB slots the buffer allocation chose, with the
IR line as a comment above it. Full tiles move with DataCopy (whole 32-byte blocks by
construction); a core's last, partial tile with DataCopyPad. Every vector call runs over
`count` = n rounded up to 64 lanes (whole 256-byte repeats for Compare).

A broadcast input (codegen/broadcast.py) has its layout in the tiling data. On the period-table
path (tableElems > 0) Init fills its period table and the shared iota once (scalar unit, then a
barrier), CopyIn loads the tile's window with DataCopyPad, and Compute gathers the offsets and
then the lanes (two Gathers); on the general path Compute's scalar loop reads each lane from GM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.broadcast import MAX_RANK
from codegen.buffers import Position, Slot
from codegen.emit.cxx import BANNER, CPP_TYPES, float_literal, scalar_expr
from codegen.ir import (
    LANES_PER_REPEAT,
    TILE_BINARY,
    TILE_SCALAR,
    TILE_UNARY,
    Kind,
    Op,
    format_instr,
    scalar_stages,
)
from codegen.schedule import SIGN_TMP_BYTES

if TYPE_CHECKING:
    from codegen.artifact import KernelArtifact
    from codegen.project import OperatorProject


def tiling_struct(project: OperatorProject) -> str:
    return f"{project.op_name}TilingData"


def host_scalars(art: KernelArtifact) -> list[int]:
    """Value ids of the scalars the tiling function computes, in tiling-data order."""
    stages = scalar_stages(art.kernel)
    return [i for i, st in stages.items() if st == "host"]


def broadcast_names(art: KernelArtifact) -> list[str]:
    """The kernel's broadcast inputs, in the order of the tiling data's broadcast entries."""
    return [p.name for p in art.kernel.inputs if p.broadcast]


def broadcast_slots(project: OperatorProject) -> int:
    """Length of the tiling data's broadcast array: the most broadcast inputs a variant has."""
    return max(len(broadcast_names(a)) for a in project.variants)


def project_helpers(art: KernelArtifact) -> str:
    """The namespace of the broadcast helpers of the artifact's operator."""
    return f"{art.op_name}_broadcast"


def broadcast_struct(project: OperatorProject) -> str:
    return f"{project.op_name}BroadcastTiling"


def scalar_slots(project: OperatorProject) -> int:
    """Length of the tiling data's scalar array: the most host scalars a variant has (>= 1)."""
    return max([1] + [len(host_scalars(a)) for a in project.variants])


def tiling_data_h(project: OperatorProject) -> str:
    guard = f"{project.file_stem.upper()}_TILING_DATA_H"
    n_bcast = broadcast_slots(project)
    bcast = [
        "// One broadcast input against the output (codegen/broadcast.py): merged output dims,",
        "// the input's element stride along each (0 where it broadcasts), and its buffers.",
        f"struct {broadcast_struct(project)} {{",
        "    int64_t rank;",
        f"    int64_t dims[{MAX_RANK}];",
        f"    int64_t strides[{MAX_RANK}];",
        "    int64_t period;       // product of dims[1:]",
        "    int64_t shift;        // strides[0]",
        "    int64_t tableElems;   // period + tileElems byte offsets; 0: the general path (no table)",
        "    int64_t windowElems;  // input elements one tile may read (0 on the general path)",
        "    int64_t inputElems;",
        "};",
        "",
    ] if n_bcast else []
    return "\n".join(
        [
            f"// {BANNER}",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            "#include <cstdint>",
            "",
            *bcast,
            f"struct {tiling_struct(project)} {{",
            "    int64_t numElements;  // elements of the output",
            "    int64_t blockFactor;  // elements per core (the last core gets the rest)",
            "    int64_t tileElems;    // elements per full tile (multiple of 256)",
            f"    float scalars[{scalar_slots(project)}];  // the variant's host scalars (see <op>.h)",
            *([f"    {broadcast_struct(project)} broadcasts[{n_bcast}];  // the variant's broadcast inputs, in order"]
              if n_bcast else []),
            "};",
            "",
            f"#endif  // {guard}",
            "",
        ]
    )


def key_names(project: OperatorProject, art: KernelArtifact) -> tuple[str, str]:
    stem = f"{project.file_stem.upper()}_TILING_KEY_{art.variant_tag.upper()}"
    return f"{stem}_SINGLE", f"{stem}_DOUBLE"


def tiling_key_h(project: OperatorProject) -> str:
    guard = f"{project.file_stem.upper()}_TILING_KEY_H"
    lines = [
        f"// {BANNER}",
        "// Tiling key = dtype code | (buffer_num - 1) << 8 | variant code << 9 (dtype codes as",
        "// ops-nn: DT_FLOAT 0, DT_FLOAT16 1, DT_BF16 27; the variant code numbers the values of",
        "// the variant axes in mixed radix, see README.md).",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
    ]
    for art in project.variants:
        single, double = key_names(project, art)
        lines += [
            f"// {art.variant_label}",
            f"#define {single} {art.key_base}",
            f"#define {double} {art.key_base | 0x100}",
        ]
    lines += ["", f"#endif  // {guard}", ""]
    return "\n".join(lines)


def variant_namespace(project: OperatorProject, art: KernelArtifact) -> str:
    return f"{project.op_name}_{art.variant_tag}"


def _slot_decl(s: Slot) -> str:
    if s.position is Position.VECIN:
        return f"    TQue<TPosition::VECIN, 1> {s.name}Queue_;"
    if s.position is Position.VECOUT:
        return f"    TQue<TPosition::VECOUT, 1> {s.name}Queue_;"
    return f"    TBuf<TPosition::VECCALC> {s.name}Buf_;"


def _slot_bytes(s: Slot) -> str:
    if s.dtype == "uint8":
        return "static_cast<uint32_t>(tileElems_ / 8)"
    return f"static_cast<uint32_t>(tileElems_ * sizeof({CPP_TYPES[s.dtype]}))"


def _tile_call(art: KernelArtifact, i: int, ref: dict[int, str]) -> str:
    k = art.kernel
    ins = k.instrs[i]
    dst = ref[i]
    a = [ref[s] for s in ins.srcs]
    if ins.op is Op.CAST:
        return f"Cast({dst}, {a[0]}, RoundMode::{ins.attr('round')}, count);"
    if ins.op in TILE_BINARY or ins.op in TILE_SCALAR:
        return f"{ins.op.value}({dst}, {a[0]}, {a[1]}, count);"
    if ins.op is Op.SIGN:
        return f"Sign({dst}, {a[0]}, signTmp, count);"
    if ins.op in TILE_UNARY:
        return f"{ins.op.value}({dst}, {a[0]}, count);"
    if ins.op is Op.COMPARE:
        scalar = k.instrs[ins.srcs[1]].kind is Kind.SCALAR
        # CompareScalar: declared by 8.1-class toolkits and still (deprecated) by newer ones,
        # where Compares, its newer name, is missing from 8.1
        fn = "CompareScalar" if scalar else "Compare"
        return f"{fn}({dst}, {a[0]}, {a[1]}, CMPMODE::{ins.attr('mode')}, count);"
    if ins.op is Op.SELECT:
        mode = f"SELMODE::VSEL_{ins.attr('mode')}_MODE"
        return f"Select({dst}, {a[0]}, {a[1]}, {a[2]}, {mode}, count);"
    if ins.op is Op.DUPLICATE:
        return f"Duplicate({dst}, {a[0]}, count);"
    if ins.op is Op.COPY_IN_BRC:
        return f"Duplicate({dst}, brc{i}_, count);"
    if ins.op is Op.COPY_IN_BCAST:
        name = str(ins.attr("name"))
        n = broadcast_names(art).index(name)
        t = CPP_TYPES[k.param(name).dtype]
        return "\n        ".join([
            f"if (bcast{n}_.tableElems > 0) {{",
            f"    Gather(bcastOffsets, table_{name}, bcastIota, static_cast<uint32_t>((start_ + offset) % "
            f"bcast{n}_.period * 4), count);",
            f"    Gather({dst}, window_{name}, bcastOffsets, 0u, count);",
            "} else {  // the general path: the scalar unit reads each lane from GM",
            "    PipeBarrier<PIPE_ALL>();  // vector work on this buffer is done",
            f"    {project_helpers(art)}::FillLanes<{t}>({dst}, {name}Gm_, bcast{n}_, start_ + offset, n);",
            "    PipeBarrier<PIPE_ALL>();  // the lanes land before vector work reads them",
            "}"])
    raise ValueError(f"no AscendC call for {ins.op.value}")


def _refs(art: KernelArtifact) -> dict[int, str]:
    ref: dict[int, str] = {}
    for i, ins in enumerate(art.kernel.instrs):
        if ins.kind is Kind.SCALAR:
            ref[i] = f"s{i}_"
        elif ins.kind is not None:
            ref[i] = art.allocation.slot_of(i).name
    return ref


def _scalar_init(art: KernelArtifact, ref: dict[int, str]) -> list[str]:
    k = art.kernel
    stages = scalar_stages(k)
    slot = {i: n for n, i in enumerate(host_scalars(art))}
    lines = []
    for i, ins in enumerate(k.instrs):
        if ins.kind is not Kind.SCALAR:
            continue
        if stages[i] == "host":
            expr = f"tilingData.scalars[{slot[i]}]"
        elif ins.op is Op.SCONST:
            expr = float_literal(float(ins.attr("value")))  # type: ignore[arg-type]
        elif ins.op is Op.SINPUT:
            expr = f"ScalarToFloat({ins.attr('name')}Gm_.GetValue(0))"
        else:
            expr = scalar_expr(ins, ref)
        lines.append(f"        {ref[i]} = {expr};  // {format_instr(k, i)}")
    return lines


def _scalar_params(art: KernelArtifact) -> list[str]:
    """Inputs read on the scalar unit: SInput operands and CopyInBrc sources."""
    names: list[str] = []
    for ins in art.kernel.instrs:
        if ins.op in (Op.SINPUT, Op.COPY_IN_BRC) and ins.attr("name") not in names:
            names.append(str(ins.attr("name")))
    return names


def _variant_block(project: OperatorProject, art: KernelArtifact) -> list[str]:
    k, alloc = art.kernel, art.allocation
    ref = _refs(art)
    data_t = CPP_TYPES[k.dtype]
    cls = "Pipeline"
    ns = variant_namespace(project, art)
    streamed = [p for p in k.inputs if p.kind is Kind.TILE and not p.broadcast] + list(k.outputs)
    bcast = broadcast_names(art)
    helpers = project_helpers(art)
    off_arg = "offset, " if bcast else ""
    scalar_params = _scalar_params(art)
    gm_args = ", ".join(f"GM_ADDR {p.name}" for p in k.inputs + k.outputs)
    has_sign = any(ins.op is Op.SIGN for ins in k.instrs)
    tile_ids = [
        i
        for i, ins in enumerate(k.instrs)
        if ins.kind in (Kind.TILE, Kind.MASK) and ins.op is not Op.COPY_IN
    ]
    n_scalars = [i for i, ins in enumerate(k.instrs) if ins.kind is Kind.SCALAR]

    out: list[str] = [
        f"// Variant {art.variant_tag}: {art.variant_label}; tiling data scalars: "
        + (", ".join(f"[{n}] {format_instr(k, i)}" for n, i in enumerate(host_scalars(art))) or "none"),
        f"namespace {ns} {{",
        "using namespace AscendC;",
        "",
        f"using DataT = {data_t};",
        f"constexpr uint32_t LANES_PER_REPEAT = {LANES_PER_REPEAT};  // 256 bytes of float32",
    ]
    if has_sign:
        out.append(f"constexpr uint32_t SIGN_TMP_BYTES = {SIGN_TMP_BYTES};  // Sign's minimum temp")
    out.append("")
    converters = {
        "float32": "__aicore__ inline float ScalarToFloat(float v) { return v; }",
        "float16": "__aicore__ inline float ScalarToFloat(half v) { return static_cast<float>(v); }",
        "bfloat16": "__aicore__ inline float ScalarToFloat(bfloat16_t v) { return ToFloat(v); }",
    }
    used_conv = sorted(
        {k.param(str(ins.attr("name"))).dtype for ins in k.instrs if ins.op is Op.SINPUT}
    )
    out += [converters[d] for d in used_conv]
    if used_conv:
        out.append("")
    out += [
        "template <int32_t BUFFER_NUM>",
        f"class {cls} {{",
        "public:",
        f"    __aicore__ inline {cls}() {{}}",
        "",
        f"    __aicore__ inline void Init({gm_args},",
        f"                                const {tiling_struct(project)}& tilingData)",
        "    {",
        "        const int64_t start = static_cast<int64_t>(GetBlockIdx()) * tilingData.blockFactor;",
        "        const int64_t rest = tilingData.numElements - start;",
        "        coreElems_ = rest < tilingData.blockFactor ? rest : tilingData.blockFactor;",
        "        tileElems_ = tilingData.tileElems;",
        "        if (coreElems_ <= 0) {",
        "            return;",
        "        }",
    ]
    for p in streamed:
        t = CPP_TYPES[p.dtype]
        out.append(
            f"        {p.name}Gm_.SetGlobalBuffer(reinterpret_cast<__gm__ {t}*>({p.name}) + start,"
            " static_cast<uint64_t>(coreElems_));"
        )
    for name in scalar_params:
        t = CPP_TYPES[k.param(name).dtype]
        out.append(f"        {name}Gm_.SetGlobalBuffer(reinterpret_cast<__gm__ {t}*>({name}), 1);")
    for n, name in enumerate(bcast):
        t = CPP_TYPES[k.param(name).dtype]
        out += [
            f"        bcast{n}_ = tilingData.broadcasts[{n}];",
            f"        {name}Gm_.SetGlobalBuffer(reinterpret_cast<__gm__ {t}*>({name}),"
            f" static_cast<uint64_t>(bcast{n}_.inputElems));",
        ]
    if bcast:
        out.append("        start_ = start;")
    for i, ins in enumerate(k.instrs):
        if ins.op is Op.COPY_IN_BRC:
            out.append(
                f"        brc{i}_ = {ins.attr('name')}Gm_.GetValue(0);  // {format_instr(k, i)}"
            )
    out += _scalar_init(art, ref)
    for s in alloc.slots:
        if s.position is Position.VECCALC:
            out.append(f"        pipe_.InitBuffer({s.name}Buf_, {_slot_bytes(s)});")
        else:
            out.append(f"        pipe_.InitBuffer({s.name}Queue_, BUFFER_NUM, {_slot_bytes(s)});")
    if has_sign:
        out.append("        pipe_.InitBuffer(signTmpBuf_, SIGN_TMP_BYTES);")
    if bcast:
        tabled = " || ".join(f"bcast{n}_.tableElems > 0" for n in range(len(bcast)))
        out += [
            f"        tabled_ = {tabled};",
            "        if (tabled_) {  // the iota and offsets of the period-table path",
            "            pipe_.InitBuffer(bcastIotaBuf_, static_cast<uint32_t>(tileElems_ * 4));",
            "            pipe_.InitBuffer(bcastOffsetsBuf_, static_cast<uint32_t>(tileElems_ * 4));",
            f"            {helpers}::FillIota(bcastIotaBuf_.Get<uint32_t>(), tileElems_);",
            "        }",
        ]
        for n, name in enumerate(bcast):
            t = CPP_TYPES[k.param(name).dtype]
            out += [
                f"        if (bcast{n}_.tableElems > 0) {{  // {name} on the period-table path",
                f"            pipe_.InitBuffer(table_{name}Buf_, static_cast<uint32_t>(bcast{n}_.tableElems * 4));",
                f"            pipe_.InitBuffer(window_{name}Queue_, BUFFER_NUM,",
                f"                static_cast<uint32_t>(((bcast{n}_.windowElems > tileElems_ ? bcast{n}_.windowElems : "
                f"tileElems_) * sizeof({t}) + 31) / 32 * 32));  // no fewer elements than a Gather's count",
                f"            {helpers}::FillTable(table_{name}Buf_.Get<uint32_t>(), bcast{n}_, sizeof({t}));",
                "        }",
            ]
        # the scalar unit's table writes must land before a Gather reads them
        out.append("        PipeBarrier<PIPE_ALL>();")
    out += [
        "    }",
        "",
        "    __aicore__ inline void Process()",
        "    {",
        "        if (coreElems_ <= 0) {",
        "            return;",
        "        }",
        "        const int64_t tiles = (coreElems_ + tileElems_ - 1) / tileElems_;",
        "        for (int64_t t = 0; t < tiles; ++t) {",
        "            const int64_t offset = t * tileElems_;",
        "            const int64_t left = coreElems_ - offset;",
        "            const uint32_t n = static_cast<uint32_t>(left < tileElems_ ? left : tileElems_);",
        "            CopyIn(offset, n);",
        f"            Compute({off_arg}n);",
        "            CopyOut(offset, n);",
        "        }",
        "    }",
        "",
        "private:",
        "    template <typename T>",
        "    __aicore__ inline void Load(const LocalTensor<T>& dst, const GlobalTensor<T>& src,"
        " int64_t offset, uint32_t n)",
        "    {",
        "        if (static_cast<int64_t>(n) == tileElems_) {",
        "            DataCopy(dst, src[static_cast<uint64_t>(offset)], n);",
        "        } else {",
        "            DataCopyExtParams params{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};",
        "            DataCopyPadExtParams<T> pad{false, 0, 0, 0};",
        "            DataCopyPad(dst, src[static_cast<uint64_t>(offset)], params, pad);",
        "        }",
        "    }",
        "",
        "    template <typename T>",
        "    __aicore__ inline void Store(const GlobalTensor<T>& dst, const LocalTensor<T>& src,"
        " int64_t offset, uint32_t n)",
        "    {",
        "        if (static_cast<int64_t>(n) == tileElems_) {",
        "            DataCopy(dst[static_cast<uint64_t>(offset)], src, n);",
        "        } else {",
        "            DataCopyExtParams params{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};",
        "            DataCopyPad(dst[static_cast<uint64_t>(offset)], src, params);",
        "        }",
        "    }",
        "",
        "    __aicore__ inline void CopyIn(int64_t offset, uint32_t n)",
        "    {",
    ]
    for s in alloc.slots:
        if s.position is Position.VECIN:
            t = CPP_TYPES[s.dtype]
            out += [
                f"        LocalTensor<{t}> {s.name} = {s.name}Queue_.AllocTensor<{t}>();",
                f"        Load({s.name}, {s.param}Gm_, offset, n);",
                f"        {s.name}Queue_.EnQue({s.name});",
            ]
    for n, name in enumerate(bcast):
        t = CPP_TYPES[k.param(name).dtype]
        out += [
            f"        if (bcast{n}_.tableElems > 0) {{",
            f"            // the input elements this tile reads: [base, base + len) ({name}'s window)",
            f"            const int64_t base = (start_ + offset) / bcast{n}_.period * bcast{n}_.shift;",
            f"            const int64_t left = bcast{n}_.inputElems - base;",
            f"            const int64_t len = left < bcast{n}_.windowElems ? left : bcast{n}_.windowElems;",
            f"            LocalTensor<{t}> window = window_{name}Queue_.AllocTensor<{t}>();",
            f"            DataCopyExtParams params{{1, static_cast<uint32_t>(len * sizeof({t})), 0, 0, 0}};",
            f"            DataCopyPadExtParams<{t}> pad{{false, 0, 0, 0}};",
            f"            DataCopyPad(window, {name}Gm_[static_cast<uint64_t>(base)], params, pad);",
            f"            window_{name}Queue_.EnQue(window);",
            "        }",
        ]
    out += [
        "    }",
        "",
        f"    __aicore__ inline void Compute({'int64_t offset, ' if bcast else ''}uint32_t n)",
        "    {",
        "        const uint32_t count = (n + LANES_PER_REPEAT - 1) / LANES_PER_REPEAT * LANES_PER_REPEAT;",
    ]
    for s in alloc.slots:
        t = CPP_TYPES[s.dtype]
        if s.position is Position.VECIN:
            out.append(f"        LocalTensor<{t}> {s.name} = {s.name}Queue_.DeQue<{t}>();")
        elif s.position is Position.VECOUT:
            out.append(f"        LocalTensor<{t}> {s.name} = {s.name}Queue_.AllocTensor<{t}>();")
        else:
            out.append(f"        LocalTensor<{t}> {s.name} = {s.name}Buf_.Get<{t}>();")
    if has_sign:
        out.append("        LocalTensor<uint8_t> signTmp = signTmpBuf_.Get<uint8_t>();")
    if bcast:
        out += ["        LocalTensor<uint32_t> bcastIota;",
                "        LocalTensor<uint32_t> bcastOffsets;",
                "        if (tabled_) {",
                "            bcastIota = bcastIotaBuf_.Get<uint32_t>();",
                "            bcastOffsets = bcastOffsetsBuf_.Get<uint32_t>();",
                "        }"]
    for n, name in enumerate(bcast):
        t = CPP_TYPES[k.param(name).dtype]
        out += [f"        LocalTensor<uint32_t> table_{name};",
                f"        LocalTensor<{t}> window_{name};",
                f"        if (bcast{n}_.tableElems > 0) {{",
                f"            table_{name} = table_{name}Buf_.Get<uint32_t>();",
                f"            window_{name} = window_{name}Queue_.DeQue<{t}>();",
                "        }"]
    for i in tile_ids:
        out.append(f"        // {format_instr(k, i)}")
        out.append(f"        {_tile_call(art, i, ref)}")
    for s in alloc.slots:
        if s.position is Position.VECOUT:
            out.append(f"        {s.name}Queue_.EnQue({s.name});")
    for s in alloc.slots:
        if s.position is Position.VECIN:
            out.append(f"        {s.name}Queue_.FreeTensor({s.name});")
    for n, name in enumerate(bcast):
        out += [f"        if (bcast{n}_.tableElems > 0) {{",
                f"            window_{name}Queue_.FreeTensor(window_{name});",
                "        }"]
    out += [
        "    }",
        "",
        "    __aicore__ inline void CopyOut(int64_t offset, uint32_t n)",
        "    {",
    ]
    for s in alloc.slots:
        if s.position is Position.VECOUT:
            t = CPP_TYPES[s.dtype]
            out += [
                f"        LocalTensor<{t}> {s.name} = {s.name}Queue_.DeQue<{t}>();",
                f"        Store({s.param}Gm_, {s.name}, offset, n);",
                f"        {s.name}Queue_.FreeTensor({s.name});",
            ]
    out += ["    }", "", "    TPipe pipe_;"]
    out += [_slot_decl(s) for s in alloc.slots]
    if has_sign:
        out.append("    TBuf<TPosition::VECCALC> signTmpBuf_;")
    if bcast:
        out += ["    TBuf<TPosition::VECCALC> bcastIotaBuf_;", "    TBuf<TPosition::VECCALC> bcastOffsetsBuf_;"]
    for n, name in enumerate(bcast):
        out += [f"    TBuf<TPosition::VECCALC> table_{name}Buf_;",
                f"    TQue<TPosition::VECIN, 1> window_{name}Queue_;",
                f"    GlobalTensor<{CPP_TYPES[k.param(name).dtype]}> {name}Gm_;",
                f"    {broadcast_struct(project)} bcast{n}_;"]
    if bcast:
        out += ["    int64_t start_ = 0;", "    bool tabled_ = false;"]
    for p in streamed:
        out.append(f"    GlobalTensor<{CPP_TYPES[p.dtype]}> {p.name}Gm_;")
    for name in scalar_params:
        out.append(f"    GlobalTensor<{CPP_TYPES[k.param(name).dtype]}> {name}Gm_;")
    for i, ins in enumerate(k.instrs):
        if ins.op is Op.COPY_IN_BRC:
            out.append(f"    {CPP_TYPES[str(ins.dtype)]} brc{i}_;")
    out += [f"    float s{i}_ = 0.0f;" for i in n_scalars]
    out += [
        "    int64_t coreElems_ = 0;",
        "    int64_t tileElems_ = 0;",
        "};",
        "",
        f"}}  // namespace {ns}",
        "",
    ]
    return out


def _broadcast_helpers(project: OperatorProject) -> list[str]:
    """FillIota and FillTable: the broadcast loads' offset tables, written by the scalar unit
    once per core (codegen/broadcast.py)."""
    return [
        f"namespace {project_helpers(project.variants[0])} {{",
        "using namespace AscendC;",
        "",
        "// iota[j] = 4 * j: the byte offsets of consecutive uint32 table entries",
        "__aicore__ inline void FillIota(const LocalTensor<uint32_t>& iota, int64_t len)",
        "{",
        "    for (int64_t j = 0; j < len; ++j) {",
        "        iota.SetValue(static_cast<uint32_t>(j), static_cast<uint32_t>(j * 4));",
        "    }",
        "}",
        "",
        "// one step of a mixed-radix counter over the layout's dims: the next output element, and",
        "// the input element it reads (the outermost dim wraps past the output's end)",
        f"__aicore__ inline void Advance(const {broadcast_struct(project)}& b, int64_t* digit, int64_t& source)",
        "{",
        "    for (int64_t d = b.rank - 1; d >= 0; --d) {",
        "        source += b.strides[d];",
        "        if (++digit[d] < b.dims[d]) {",
        "            return;",
        "        }",
        "        source -= b.strides[d] * b.dims[d];",
        "        digit[d] = 0;",
        "    }",
        "}",
        "",
        "// table[k] = byte offset of the input element output element k reads, k < tableElems; a",
        "// mixed-radix counter over the layout's dims (the outermost wraps past the output's end)",
        f"__aicore__ inline void FillTable(const LocalTensor<uint32_t>& table, const {broadcast_struct(project)}& b,",
        "                                 uint32_t elemBytes)",
        "{",
        f"    int64_t digit[{MAX_RANK}] = {{0}};",
        "    int64_t source = 0;",
        "    for (int64_t k = 0; k < b.tableElems; ++k) {",
        "        table.SetValue(static_cast<uint32_t>(k), static_cast<uint32_t>(source * elemBytes));",
        "        Advance(b, digit, source);",
        "    }",
        "}",
        "",
        "// The general path: lane j = the input element output element first + j reads, j < n",
        "template <typename T>",
        "__aicore__ inline void FillLanes(const LocalTensor<T>& dst, const GlobalTensor<T>& src,",
        f"                                 const {broadcast_struct(project)}& b, int64_t first, uint32_t n)",
        "{",
        f"    int64_t digit[{MAX_RANK}] = {{0}};",
        "    int64_t rest = first;",
        "    int64_t source = 0;",
        "    for (int64_t d = b.rank - 1; d >= 0; --d) {",
        "        digit[d] = rest % b.dims[d];",
        "        rest /= b.dims[d];",
        "        source += digit[d] * b.strides[d];",
        "    }",
        "    for (uint32_t j = 0; j < n; ++j) {",
        "        dst.SetValue(j, src.GetValue(static_cast<uint64_t>(source)));",
        "        Advance(b, digit, source);",
        "    }",
        "}",
        f"}}  // namespace {project_helpers(project.variants[0])}",
        "",
    ]


def kernel_h(project: OperatorProject) -> str:
    guard = f"{project.file_stem.upper()}_H"
    out = [
        f"// {BANNER}",
        f"// Pipelines of {project.op_name} on {project.target.name}, one per variant.",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "kernel_operator.h"',
        f'#include "{project.file_stem}_tiling_data.h"',
        "",
    ]
    if broadcast_slots(project):
        out += _broadcast_helpers(project)
    for art in project.variants:
        out += _variant_block(project, art)
    out += [f"#endif  // {guard}", ""]
    return "\n".join(out)


def kernel_cpp(project: OperatorProject) -> str:
    k = project.variants[0].kernel
    params = [p.name for p in k.inputs + k.outputs]
    gm_args = ", ".join(f"GM_ADDR {n}" for n in params)
    call = ", ".join(params)
    struct = tiling_struct(project)
    lines = [
        f"// {BANNER}",
        f"// Kernel entry of {project.op_name} on {project.target.name}: runs the variant and",
        "// buffering the tiling key names.",
        f'#include "{project.file_stem}.h"',
        f'#include "{project.file_stem}_tiling_key.h"',
        "",
        f'extern "C" __global__ __aicore__ void {project.file_stem}({gm_args},',
        "    GM_ADDR workspace, GM_ADDR tiling)",
        "{",
        f"    REGISTER_TILING_DEFAULT({struct});",
        f"    GET_TILING_DATA_WITH_STRUCT({struct}, tilingData, tiling);",
        "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);",
    ]
    first = True
    for art in project.variants:
        single, double = key_names(project, art)
        cls = f"{variant_namespace(project, art)}::Pipeline"
        for key, bufs in ((single, 1), (double, 2)):
            kw = "if" if first else "} else if"
            first = False
            lines += [
                f"    {kw} (TILING_KEY_IS({key})) {{",
                f"        {cls}<{bufs}> op;",
                f"        op.Init({call}, tilingData);",
                "        op.Process();",
            ]
    lines += ["    }", "}", ""]
    return "\n".join(lines)
