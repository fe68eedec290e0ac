"""End to end: unfused ONNX -> lowering.fuse -> build_kernels -> plans, reports, AscendC projects.

Also: byte-identical output, sanitised names, one AscendC call per IR instruction, project layout.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.api import build_kernels, emit_kernels, format_ir, kernel_for_node
from codegen.emit import project_files
from codegen.emit.kernel_src import key_names
from codegen.errors import CodegenError
from codegen.ir import VECTOR_OPS, Kind, Op
from codegen.names import snake_case
from codegen.nodes import fused_nodes, node_spec
from codegen.op_interface import interface
from codegen.project import operator_projects, project_of
from codegen.targets import TARGETS
from contracts.fused_ops import DOMAIN
from lowering import fuse

sys.path.insert(0, str(Path(__file__).parent))  # template_presets.py sits beside the tests
from template_presets import TEMPLATE_8_1_RC1, as_cache, differences  # noqa: E402

ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
EVIL = '../../x"; system("rm -rf /")'


def _model(nodes, inputs, outputs, inits=(), opset: int = 18) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _const(name: str, value: float, elem: int) -> onnx.TensorProto:
    np_t = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}.get(elem)
    if np_t is None:
        return helper.make_tensor(name, elem, [], [value])
    return numpy_helper.from_array(np.asarray(value, np_t), name)


def smooth_l1_where(dtype: str, beta: float, reduction: str, full_dout: bool) -> onnx.ModelProto:
    """PyTorch's decomposition: Where(|x| < b, g*x/b, g*sign(x)), g = dout * norm."""
    e = ELEM[dtype]
    shape = [4, 16]
    nodes = [helper.make_node("Sub", ["p", "l"], ["x"]), helper.make_node("Abs", ["x"], ["ax"])]
    inits = [_const("beta", beta, e)]
    g = "d"
    if reduction == "mean":
        inits.append(_const("norm", 1.0 / 64, e))
        nodes.append(helper.make_node("Mul", ["d", "norm"], ["g"]))
        g = "g"
    nodes += [
        helper.make_node("Less", ["ax", "beta"], ["c"]),
        helper.make_node("Mul", [g, "x"], ["gx"]),
        helper.make_node("Div", ["gx", "beta"], ["lin"]),
        helper.make_node("Sign", ["x"], ["sx"]),
        helper.make_node("Mul", [g, "sx"], ["sg"]),
        helper.make_node("Where", ["c", "lin", "sg"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("p", e, shape),
        helper.make_tensor_value_info("l", e, shape),
        helper.make_tensor_value_info("d", e, shape if full_dout else []),
    ]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", e, shape)], inits)


def proximal_max(dtype: str, runtime: bool) -> onnx.ModelProto:
    e = ELEM[dtype]
    shape = [8, 8]
    inputs = [helper.make_tensor_value_info("var", e, shape), helper.make_tensor_value_info("delta", e, shape)]
    inits = [_const("zero", 0.0, e)]
    if runtime:
        inputs += [helper.make_tensor_value_info(n, e, []) for n in ("alpha", "l1", "l2")]
        inits.append(_const("one", 1.0, e))
        scal = [
            helper.make_node("Mul", ["alpha", "l1"], ["t"]),
            helper.make_node("Mul", ["alpha", "l2"], ["al2"]),
            helper.make_node("Add", ["one", "al2"], ["k"]),
        ]
    else:
        inits += [_const("alpha", 0.1, e), _const("t", 0.005, e), _const("k", 1.02, e)]
        scal = []
    nodes = scal + [
        helper.make_node("Mul", ["alpha", "delta"], ["ad"]),
        helper.make_node("Sub", ["var", "ad"], ["p"]),
        helper.make_node("Abs", ["p"], ["ap"]),
        helper.make_node("Sub", ["ap", "t"], ["d"]),
        helper.make_node("Max", ["d", "zero"], ["m"]),
        helper.make_node("Sign", ["p"], ["sp"]),
        helper.make_node("Mul", ["sp", "m"], ["s"]),
        helper.make_node("Div", ["s", "k"], ["y"]),
    ]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", e, shape)], inits)


def _fused(model: onnx.ModelProto) -> onnx.ModelProto:
    fused, _ = fuse(model)
    assert fused_nodes(fused), "the graph pass did not fuse the test model"
    return fused


UNFUSED = [
    smooth_l1_where(dt, beta, red, full)
    for dt, beta, red, full in itertools.product(
        ("float32", "float16"), (0.5, 1.0), ("mean", "sum"), (False, True)
    )
] + [proximal_max(dt, rt) for dt, rt in itertools.product(("float32", "float16"), (False, True))]


@pytest.fixture(scope="module")
def fused_models() -> list[onnx.ModelProto]:
    return [_fused(m) for m in UNFUSED]


def test_every_fused_kernel_builds_schedules_and_emits_for_all_targets(fused_models, tmp_path: Path) -> None:
    for target in TARGETS:
        for n, model in enumerate(fused_models):
            arts = build_kernels(model, target)
            assert arts and all(a.target.name == target for a in arts)
            for art in arts:
                rep = art.report()
                json.dumps(rep)
                assert rep["op"] == art.kernel.op_type and rep["target"] == target
                assert rep["vector_instructions_per_tile"] == art.kernel.vector_instruction_count()
                assert rep["sample"]["block_dim"] >= 1 and rep["sample"]["tile_elems"] > 0
                for size in (0, 1, 33, 2**31 + 1):
                    art.schedule(size)
            paths = emit_kernels(arts, tmp_path / target / str(n))
            assert all(p.is_file() and p.stat().st_size > 0 for p in paths)


def test_fused_nodes_become_expected_kernels(fused_models) -> None:
    sl1 = fused_models[0]  # float32, beta 0.5, mean, scalar dout
    k = kernel_for_node(sl1, fused_nodes(sl1)[0])
    assert k.param("dout").kind is Kind.SCALAR
    assert any(ins.op is Op.SNUMEL for ins in k.instrs)
    # constant or not, alpha/l1/l2 are read at run time as CANN's operator reads them: every
    # declared input is used, and one kernel serves every value
    for pgd in (fused_models[-4], fused_models[-3]):  # constant scalars, runtime scalars
        k = kernel_for_node(pgd, fused_nodes(pgd)[0])
        read = {str(ins.attr("name")) for ins in k.instrs if ins.op in (Op.SINPUT, Op.COPY_IN)}
        assert read == {p.name for p in k.inputs}
        assert k.vector_instruction_count() == 8


def test_identical_nodes_share_one_kernel_and_text_lists_them() -> None:
    model = _fused(smooth_l1_where("float32", 0.5, "sum", True))
    node = fused_nodes(model)[0]
    twin = onnx.NodeProto()
    twin.CopyFrom(node)
    twin.name = EVIL
    twin.output[0] = "y2"
    model.graph.node.append(twin)
    model.graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4, 16]))
    arts = build_kernels(model, "ascend910b")
    assert len(arts) == 1 and arts[0].nodes == (node.name, EVIL)
    text = format_ir(arts)
    assert text.startswith(f"# {arts[0].file_stem} {arts[0].variant_tag} (ascend910b) serves: ")
    assert EVIL not in text and "system(" not in text


def test_emit_is_byte_identical(fused_models, tmp_path: Path) -> None:
    for model in fused_models[::3]:
        arts_a = build_kernels(model, "ascend950")
        arts_b = build_kernels(onnx.load_from_string(model.SerializeToString()), "ascend950")
        a = emit_kernels(arts_a, tmp_path / "a")
        b = emit_kernels(arts_b, tmp_path / "b")
        assert [p.relative_to(tmp_path / "a") for p in a] == [p.relative_to(tmp_path / "b") for p in b]
        for pa, pb in zip(a, b):
            assert pa.read_bytes() == pb.read_bytes()


def test_malicious_node_name_stays_out_of_paths_and_code(tmp_path: Path) -> None:
    model = _fused(proximal_max("float16", True))
    fused_nodes(model)[0].name = EVIL
    out = tmp_path / "kernels"
    art = build_kernels(model, "ascend910_93")[0]
    paths = emit_kernels([art], out)
    root = out.resolve()
    for p in paths:
        assert root in p.resolve().parents
        assert re.fullmatch(r"[a-z0-9_./A-Z]+", str(p.relative_to(root)))
        text = p.read_text()
        assert "system(" not in text and '/x"' not in text
        if p.suffix in (".cpp", ".h", ".txt", ".sh"):
            assert "rm -rf" not in text and ".._" not in text
    readme = next(p for p in paths if p.name == "README.md").read_text()
    assert "___.._x___system__rm_-rf____" in readme  # the sanitised name, for the user's reference
    assert {p.parent.name for p in paths} == {art.file_stem, "op_host", "op_kernel", "examples"}
    assert f"{EVIL}" not in "".join(p.read_text() for p in paths if p.name != "README.md")


def test_project_layout_and_one_call_per_instruction(fused_models) -> None:
    for model in (fused_models[1], fused_models[-1]):
        art = build_kernels(model, "ascend910b")[0]
        files = project_files(project_of([art]))
        stem = art.file_stem
        assert set(files) == {
            "CMakeLists.txt", "CMakePresets.json", "README.md", "build.sh", "build_stamp.json",
            "examples/CMakeLists.txt", f"examples/test_aclnn_{stem}.cpp",
            "op_host/CMakeLists.txt", "op_kernel/CMakeLists.txt",
            f"op_host/{stem}_def.cpp", f"op_host/{stem}_infershape.cpp", f"op_host/{stem}_tiling.cpp",
            f"op_kernel/{stem}.cpp", f"op_kernel/{stem}.h",
            f"op_kernel/{stem}_tiling_data.h", f"op_kernel/{stem}_tiling_key.h",
        }
        header = files[f"op_kernel/{stem}.h"]
        compute = header[header.index("void Compute("): header.index("void CopyOut(")]
        calls = re.findall(r"^\s+(\w+)\(.*count\);$", compute, re.M)
        want = [ins.op.value for ins in art.kernel.instrs if ins.op in VECTOR_OPS]
        assert "Compares(" not in compute  # 8.1-class toolkits declare only CompareScalar
        assert [c.replace("CompareScalar", "Compare") for c in calls] == want
        assert f'extern "C" __global__ __aicore__ void {stem}(' in files[f"op_kernel/{stem}.cpp"]
        assert f'AddConfig("{art.target.compute_unit}"' in files[f"op_host/{stem}_def.cpp"]
        assert "Cast(" not in compute or "RoundMode::CAST_RINT" in compute or art.kernel.dtype == "float32"
        assert art.ir_text.splitlines()[0] in files["README.md"]
        assert f"namespace {art.op_name}_{art.variant_tag} {{" in header
        assert f"TILING_KEY_IS({stem.upper()}_TILING_KEY_{art.variant_tag.upper()}_DOUBLE)" in files[
            f"op_kernel/{stem}.cpp"]
        assert f"#define {stem.upper()}_TILING_KEY_{art.variant_tag.upper()}_SINGLE {art.key_base}\n" in files[
            f"op_kernel/{stem}_tiling_key.h"]
        for attr in interface(art.op_name).attributes:
            assert f'this->Attr("{attr.name}")' in files[f"op_host/{stem}_def.cpp"]
        presets = json.loads(files["CMakePresets.json"])["configurePresets"][0]["cacheVariables"]
        assert presets["ASCEND_COMPUTE_UNIT"]["value"] == art.target.compute_unit


def test_presets_have_the_template_cache_variables(fused_models) -> None:
    """Every variable of the toolkit template's preset (8.1.RC1, as a fact: template_presets.py),
    in its order, with its type and, where a project does not set it, its value."""
    for target in TARGETS:
        for project in operator_projects([a for m in fused_models for a in build_kernels(m, target)]):
            cache = json.loads(project_files(project)["CMakePresets.json"])["configurePresets"][0]["cacheVariables"]
            assert differences(cache, as_cache(TEMPLATE_8_1_RC1)) == [], f"{project.op_type} for {target}"
            assert cache["ASCEND_COMPUTE_UNIT"]["value"] == TARGETS[target].compute_unit
    bad = as_cache(TEMPLATE_8_1_RC1)
    del bad["CMAKE_CROSS_PLATFORM_COMPILER"]
    assert differences(bad, as_cache(TEMPLATE_8_1_RC1))  # the check sees a missing variable


def test_one_operator_per_op_type_with_a_tiling_key_per_variant(fused_models, tmp_path: Path) -> None:
    arts = [a for m in fused_models for a in build_kernels(m, "ascend950")]
    projects = operator_projects(arts)
    assert sorted(p.op_type for p in projects) == sorted({a.kernel.op_type for a in arts})
    for project in projects:
        files = project_files(project)
        stem = project.file_stem
        assert stem == snake_case(project.op_type)
        entry = files[f"op_kernel/{stem}.cpp"]
        tiling = files[f"op_host/{stem}_tiling.cpp"]
        keys = {a.key_base for a in project.variants}
        assert len(keys) == len(project.variants) and len(keys) > 1
        for art in project.variants:
            single, double = key_names(project, art)
            assert f"TILING_KEY_IS({single})" in entry and f"TILING_KEY_IS({double})" in entry
            assert f"    {{{single}, " in tiling  # the host's variant table
            assert f"HostScalars{art.variant_tag}(" in tiling
        # one OpDef: CANN's operator lists CANN's dtypes, the project's own one dtype per variant
        # dtype combination
        combos = {tuple(p.dtype for p in a.kernel.inputs + a.kernel.outputs) for a in project.variants}
        opdef = files[f"op_host/{stem}_def.cpp"]
        assert opdef.count("OP_ADD(") == 1
        first = re.search(r"\.DataType\(\{([^}]*)\}\)", opdef)
        listed = interface(project.op_name).dtypes or combos
        assert first is not None and len(first.group(1).split(",")) == len(listed)
    written = emit_kernels(arts, tmp_path)
    assert {p.relative_to(tmp_path).parts[0] for p in written} == {p.file_stem for p in projects}


def test_nodes_that_differ_only_in_values_share_one_kernel() -> None:
    """sigma is read at tiling time: nodes with other sigmas share one kernel and one key."""
    models = [_fused(smooth_l1_where("float32", beta, "sum", True)) for beta in (0.5, 2.0, 3.0)]
    combined = [a for m in models for a in build_kernels(m, "ascend910b")]
    assert len({a.kernel.variant for a in combined}) == 1
    assert dict(combined[0].kernel.variant)["sigma"] == "positive"
    assert len({a.structure for a in combined}) == 1 and len({a.ir_text for a in combined}) == 3
    (project,) = operator_projects(combined)
    assert len(project.variants) == 1 and len(project.nodes) == 3


def test_tiling_constants_match_the_python_plan(fused_models) -> None:
    from codegen.schedule import UB_RESERVE_BYTES, fixed_bytes, tile_block_bytes

    for model in fused_models:
        for target in TARGETS:
            art = build_kernels(model, target)[0]
            project = project_of([art])
            tiling = project_files(project)[f"op_host/{art.file_stem}_tiling.cpp"]
            consts = dict(re.findall(r"constexpr int64_t (\w+) = (\d+);", tiling))
            assert int(consts["TARGET_UB_BYTES"]) == art.target.ub_bytes
            assert int(consts["UB_RESERVE_BYTES"]) == UB_RESERVE_BYTES
            row = re.search(r"\{(\w+), (\d+), (\d+), (\d+), (\d+)u, HostScalars", tiling)
            assert row is not None and row.group(1) == key_names(project, art)[0]
            assert int(row.group(2)) == tile_block_bytes(art.allocation, 1)
            assert int(row.group(3)) == tile_block_bytes(art.allocation, 2)
            assert int(row.group(4)) == fixed_bytes(art.kernel, art.target)
            streamed = sum(1 << n for n, p in enumerate(art.kernel.inputs) if p.kind is Kind.TILE)
            assert int(row.group(5)) == streamed


def test_node_spec_reads_constants_and_refuses_bad_nodes() -> None:
    model = _fused(proximal_max("float32", False))
    spec = node_spec(model, fused_nodes(model)[0])
    assert spec.inputs["alpha"].const == pytest.approx(0.1)
    # an initializer that is also a graph input can be overridden: it is a runtime value
    name = fused_nodes(model)[0].input[1]
    model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, []))
    assert node_spec(model, fused_nodes(model)[0]).inputs["alpha"].const is None
    plain = helper.make_node("Relu", ["a"], ["b"], name="r")
    with pytest.raises(CodegenError, match="not a fused op"):
        node_spec(model, plain)
    odd = helper.make_node("ApplyProximalGradientDescent", ["u", "a", "b", "c", "w"], ["z"], domain=DOMAIN, name="q")
    with pytest.raises(CodegenError, match="no type known"):
        node_spec(model, odd)


REPO = Path(__file__).resolve().parents[2]
EXPORTED = sorted(
    [*REPO.glob("tests/fixtures/*/*.onnx"), *REPO.glob("models/*.onnx")]
)


def test_every_exported_model_lowers_schedules_and_emits(tmp_path: Path) -> None:
    """What the graph pass produces from real exporter output (committed fixtures and samples)."""
    assert EXPORTED, "no exporter fixtures found"
    distinct: dict[tuple[str, str], object] = {}
    for path in EXPORTED:
        fused, _ = fuse(str(path))
        if fused_nodes(fused):
            for target in TARGETS:
                for art in build_kernels(fused, target):
                    distinct.setdefault((art.file_stem, target), art)
    assert distinct
    for art in distinct.values():
        for size in (0, 1, 31, 2**31 + 1):
            art.schedule(size)
        art.report()
        emit_kernels([art], tmp_path / art.target.name)
