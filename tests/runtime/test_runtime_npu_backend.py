"""The npu backend without a device: fake CANN libraries (fake_cann/, the C interface of CANN 8.1's
acl.h, acl_rt.h and aclnn, with its per-thread contexts and once-per-process aclInit) behind the
backend's real ctypes path.

Process-wide behaviour (one ACL runtime, release at exit) runs in a subprocess of its own
(npu_session.py); discovery, the build stamp and library loading run here.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # npu_fakes.py and npu_session.py sit beside the tests

from npu_fakes import (
    CC,
    FakeLibraries,
    aclnn_prototypes,
    compile_fakes,
    emitted_operators,
    install_package,
    make_toolkit,
    run_install,
    stage_package,
)
from npu_session import calls

from codegen.emit import project_files
from codegen.emit.build_stamp import build_stamp, installed_stamp_name
from codegen.emit.vendor import vendor_name
from codegen.project import OperatorProject, operator_projects, project_of
from contracts.fused_ops import proximal_gd_reference, smooth_l1_grad_reference
from runtime.backend import BackendError
from runtime.backends.cpu import artifact_for
from runtime.npu.acl_runtime import AclRuntime
from runtime.npu.packages import OpPackage, OpResolver, PackageSearch, find_packages, load_priority, stamp_problem
from runtime.npu.toolkit import candidates, find_toolkit
from runtime.precision import compare

TARGET = "ascend950"
SESSION = Path(__file__).with_name("npu_session.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> FakeLibraries:
    if CC is None:
        pytest.skip("no C compiler for the fake CANN libraries")
    return compile_fakes(tmp_path_factory.mktemp("fake_cann"))


def _stamps(seed: int) -> dict[str, dict[str, str]]:
    """Per operator, the build stamp (file name -> text) of the package lower would build for the
    session's nodes."""
    arts = [artifact_for(call.spec, TARGET) for call in calls(np.random.default_rng(seed)).values()]
    return {p.op_name: {installed_stamp_name(p.file_stem): build_stamp(p)} for p in operator_projects(arts)}


INSTALL_ORDER = [p.op_name for p in emitted_operators()]


def _run_session(tmp: Path, libs: FakeLibraries, seed: int, *flags: str, stamped: bool = True) -> dict:
    """The session over a toolkit with one package per operator installed, as lower's projects
    build them (each operator's aclnn library alone, under its own vendor), in INSTALL_ORDER."""
    home = make_toolkit(tmp / "Ascend" / "ascend-toolkit" / "latest", libs)
    stamps = _stamps(seed)
    for op in INSTALL_ORDER:
        install_package(home / "opp" / "vendors" / vendor_name(op), libs.per_op[op],
                        stamps[op] if stamped else None)
    log = tmp / "acl.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "FAKE_ACL"))}
    env.update(ASCEND_HOME_PATH=str(home), FAKE_ACL_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    out = tmp / "session.npz"
    proc = subprocess.run([sys.executable, str(SESSION), str(out), str(seed), *flags], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        result = {k: z[k] for k in z.files}
    result["log"] = log.read_text().splitlines()
    result["home"] = home
    return result


@pytest.fixture(scope="module")
def session(libs: FakeLibraries, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run_session(tmp_path_factory.mktemp("session"), libs, 11)


@pytest.fixture(scope="module")
def preinit_session(libs: FakeLibraries, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run_session(tmp_path_factory.mktemp("preinit"), libs, 12, "--acl-initialised", stamped=False)


def _calls(log: list[str]) -> list[str]:
    """The log without thread ids ('session end' marks the end of the script's main)."""
    return [line if line == "session end" else line.split(" ", 1)[1] for line in log]


def _check_results(result: dict, seed: int) -> None:
    nodes = calls(np.random.default_rng(seed))
    x, s = nodes["sl1"].inputs, nodes["prox"].inputs
    golden = smooth_l1_grad_reference(x["predict"], x["label"], x["dout"], 0.5, "mean").astype(np.float32)
    update = proximal_gd_reference(s["var"], s["alpha"], s["l1"], s["l2"], s["delta"]).astype(np.float32)
    h, f = nodes["huber"].inputs, nodes["folded"].inputs
    huber = smooth_l1_grad_reference(h["predict"], h["label"], h["dout"], 0.5, "sum", 0.5).astype(np.float32)
    folded = proximal_gd_reference(f["var"], f["alpha"], f["l1"], f["l2"], f["delta"], "folded", 0.75)
    for name, want in (("first", golden), ("threaded", golden), ("second", update), ("third", update),
                       ("huber", huber), ("folded", folded.astype(np.float16))):
        assert result[name].dtype == want.dtype, name
        assert compare(name, result[name], want).passed, f"{name} (seed {seed})"


def test_two_backends_in_one_process_share_one_initialised_runtime(session: dict) -> None:
    _check_results(session, 11)
    log = _calls(session["log"])
    assert log.count("aclInit -> 0") == 1 and not any(c.startswith("aclInit -> 1") for c in log)
    assert log.count("aclrtSetDevice 0") == 1
    assert log.count("aclrtCreateStream 0") == 4  # a stream per backend
    assert bool(session["owns_acl"])


def test_a_launch_from_another_thread_binds_the_device_context_there(session: dict) -> None:
    assert int(session["thread_id"]) != int(session["main_id"])
    np.testing.assert_array_equal(session["threaded"], session["first"])
    in_thread = [line.split(" ", 1)[1] for line in session["log"] if line.split(" ", 1)[0] == str(session["thread_id"])]
    assert in_thread[0] == "aclrtSetCurrentContext 0"
    assert in_thread[-1] == "aclnnSmoothL1LossGradV2 -> 0"
    # without that binding the fake refuses the thread, as a device does: 107002 (no context)
    assert int(session["unbound_status"]) == 107002


def test_close_releases_the_stream_and_exit_releases_the_rest_in_order(session: dict) -> None:
    log = _calls(session["log"])
    end = log.index("session end")
    during, at_exit = log[:end], log[end + 1:]
    assert during.count("aclrtDestroyStream 0") == 3  # two `with` blocks and close() (twice: once)
    assert "run() after close()" in str(session["after_close"])
    assert at_exit == ["aclrtSetCurrentContext 0", "aclrtDestroyStream 0", "aclrtResetDevice 0 streams=0",
                       "aclFinalize streams=0 allocations=0 devices=0 -> 0"]
    for i, line in enumerate(log):
        if line.startswith("aclrtDestroyStream"):
            assert log[i - 1] == "aclrtSetCurrentContext 0"  # in the context the stream belongs to
    assert int(session["live_tensors"]) == 0


def test_the_backend_says_what_it_found(session: dict) -> None:
    notes = str(session["notes"]).splitlines()
    home = session["home"]
    assert notes[0] == f"using CANN toolkit {home} (ASCEND_HOME_PATH)"
    for i, op in enumerate(reversed(INSTALL_ORDER), 1):  # each install puts its vendor first
        lib = home / "opp" / "vendors" / vendor_name(op) / "op_api" / "lib" / "libcust_opapi.so"
        assert f"aclnn{op} from {lib} (the toolkit's opp vendors/config.ini load_priority #{i})" in notes
    assert not [n for n in notes if n.startswith("warning")]  # the package holds these kernels
    assert str(session["quiet_notes"]) == ""


def test_acl_initialised_by_another_library_is_used_and_left_to_it(preinit_session: dict) -> None:
    _check_results(preinit_session, 12)
    log = _calls(preinit_session["log"])
    assert log[:2] == ["aclInit -> 0", "aclInit -> 100002"]
    assert not bool(preinit_session["owns_acl"])
    at_exit = log[log.index("session end") + 1:]
    assert at_exit == ["aclrtSetCurrentContext 0", "aclrtDestroyStream 0",
                       "aclFinalize streams=0 allocations=0 devices=1 -> 0"]  # the owner's finalize
    notes = str(preinit_session["notes"])
    assert "ACL was already initialised in this process" in notes
    assert "but it has no build stamp (smooth_l1_loss_grad_v2.build_stamp.json)" in notes
    quiet = str(preinit_session["quiet_notes"]).splitlines()  # quiet: the warning, nothing else
    assert len(quiet) == 1 and quiet[0].startswith("warning: aclnnSmoothL1LossGradV2 comes from")


def _toolkit(path: Path) -> Path:
    (path / "lib64").mkdir(parents=True)
    (path / "lib64" / "libascendcl.so").write_bytes(b"")
    return path


def test_toolkit_candidates_follow_cann_order(tmp_path: Path) -> None:
    root, user = tmp_path / "usr" / "Ascend", tmp_path / "home" / "Ascend"
    env = {"ASCEND_HOME_PATH": "/a", "ASCEND_TOOLKIT_HOME": "/b"}
    assert [str(p) for _, p in candidates(env, (root, user))] == [
        "/a", "/b", str(root / "ascend-toolkit/latest"), str(user / "ascend-toolkit/latest"),
        str(root / "cann"), str(user / "cann")]


@pytest.mark.parametrize("installed, env, chosen, source", [
    (["home", "tk", "r8", "u8", "rn", "un"], {"ASCEND_HOME_PATH": "home", "ASCEND_TOOLKIT_HOME": "tk"}, "home",
     "ASCEND_HOME_PATH"),
    (["tk", "r8"], {"ASCEND_TOOLKIT_HOME": "tk"}, "tk", "ASCEND_TOOLKIT_HOME"),
    (["r8", "u8", "rn"], {}, "r8", "the default 8.x root install"),
    (["u8", "rn"], {}, "u8", "the default 8.x non-root install"),
    (["rn", "un"], {}, "rn", "the default newer root install"),
    (["un"], {}, "un", "the default newer non-root install"),
])
def test_the_first_toolkit_in_order_is_used(tmp_path: Path, installed: list[str], env: dict[str, str],
                                            chosen: str, source: str) -> None:
    root, user = tmp_path / "root", tmp_path / "user"
    places = {"home": tmp_path / "home", "tk": tmp_path / "tk", "r8": root / "ascend-toolkit/latest",
              "u8": user / "ascend-toolkit/latest", "rn": root / "cann", "un": user / "cann"}
    for name in installed:
        _toolkit(places[name])
    found = find_toolkit({k: str(places[v]) for k, v in env.items()}, (root, user))
    assert (found.home, found.source) == (places[chosen], source)
    assert found.opp_path == places[chosen] / "opp"


def test_a_variable_naming_no_toolkit_is_passed_over_and_said(tmp_path: Path) -> None:
    good = _toolkit(tmp_path / "tk")
    found = find_toolkit({"ASCEND_HOME_PATH": str(tmp_path / "gone"), "ASCEND_TOOLKIT_HOME": str(good),
                          "ASCEND_OPP_PATH": str(tmp_path / "opp")}, (tmp_path / "r", tmp_path / "u"))
    assert found.home == good and found.opp_path == tmp_path / "opp" and found.opp_source == "ASCEND_OPP_PATH"
    assert found.passed_over == (f"ASCEND_HOME_PATH={tmp_path / 'gone'} (no such directory)",)


def test_no_toolkit_lists_every_place_looked_at(tmp_path: Path) -> None:
    (tmp_path / "r" / "cann").mkdir(parents=True)
    with pytest.raises(BackendError) as err:
        find_toolkit({"ASCEND_TOOLKIT_HOME": str(tmp_path / "r" / "cann")}, (tmp_path / "r", tmp_path / "u"))
    msg = str(err.value)
    assert "\n" not in msg
    r, u = tmp_path / "r", tmp_path / "u"
    assert (f"looked at, in order, ASCEND_HOME_PATH (not set); "
            f"ASCEND_TOOLKIT_HOME={r / 'cann'} (no lib64/libascendcl.so); "
            f"{r / 'ascend-toolkit/latest'}, {u / 'ascend-toolkit/latest'} (no such directory); "
            f"{r / 'cann'} (no lib64/libascendcl.so); {u / 'cann'} (no such directory). ") in msg
    assert msg.endswith("source its set_env.sh, or use --backend cpu")


def _package(root: Path) -> Path:
    (root / "op_api" / "lib").mkdir(parents=True)
    (root / "op_api" / "lib" / "libcust_opapi.so").write_bytes(b"")
    return root


def test_packages_follow_custom_path_then_load_priority_not_the_alphabet(tmp_path: Path) -> None:
    opp = tmp_path / "opp"
    vendors = opp / "vendors"
    for name in ("a_old", "z_new", "unlisted"):
        _package(vendors / name)
    (vendors / "config.ini").write_text("# installed by the run packages\nload_priority = z_new, a_old\n")
    mine = _package(tmp_path / "mine" / "vendors" / "ascend_lowering")
    env = {"ASCEND_CUSTOM_OPP_PATH": f"{mine}:{tmp_path / 'empty'}:"}
    search = find_packages(opp, "ASCEND_OPP_PATH", env)
    assert [(p.root, p.source) for p in search.packages] == [
        (mine, "ASCEND_CUSTOM_OPP_PATH entry 1"),
        (vendors / "z_new", "ASCEND_OPP_PATH vendors/config.ini load_priority #1"),
        (vendors / "a_old", "ASCEND_OPP_PATH vendors/config.ini load_priority #2")]
    looked = "\n".join(search.looked)
    assert f"{tmp_path / 'empty'} (ASCEND_CUSTOM_OPP_PATH entry 2): no op_api/lib/libcust_opapi.so" in looked
    assert f"{vendors / 'unlisted'}: installed but not in config.ini load_priority" in looked


@pytest.mark.parametrize("text, names", [
    ("load_priority=customize\n", ["customize"]),
    ("[x]\nload_priority=b,a,\n", ["b", "a"]),
    ("load_priority=b,a,b\n", ["b", "a"]),  # a vendor listed twice loads at its first place
    ("load_priority_old=a\n", []),
    ("", []),
])
def test_load_priority_line(tmp_path: Path, text: str, names: list[str]) -> None:
    (tmp_path / "config.ini").write_text(text)
    assert load_priority(tmp_path / "config.ini") == names


def test_each_operator_comes_from_the_first_package_that_has_it(tmp_path: Path, libs: FakeLibraries) -> None:
    ctypes.CDLL(str(libs.acl))  # what libcust_opapi.so links to, as the toolkit's set_env.sh provides
    prox_only = install_package(tmp_path / "vendors" / "prox_only", libs.per_op["ApplyProximalGradientDescent"])
    both = install_package(tmp_path / "vendors" / "both", libs.opapi)
    search = find_packages(tmp_path, "test", {})
    assert [p.root for p in search.packages] == [both, prox_only]  # installed last, first in load_priority
    notes: list[str] = []
    reversed_search = PackageSearch((OpPackage(prox_only, "first"), OpPackage(both, "second")))
    resolver = OpResolver(reversed_search, notes.append)
    assert resolver.resolve("ApplyProximalGradientDescent").package.root == prox_only
    assert resolver.resolve("SmoothL1LossGradV2").package.root == both
    assert notes == [f"aclnnApplyProximalGradientDescent from {prox_only}/op_api/lib/libcust_opapi.so (first)",
                     f"aclnnSmoothL1LossGradV2 from {both}/op_api/lib/libcust_opapi.so (second)"]
    with pytest.raises(BackendError, match="no installed custom-op package has aclnnNoSuchOp; searched "):
        resolver.resolve("NoSuchOp")


def test_the_fake_aclnn_api_is_the_one_op_build_derives_from_the_emitted_opdefs(libs: FakeLibraries) -> None:
    """The fake's prototypes come from the emitted OpDefs (a drifting definition does not compile);
    CANN's operator gets CANN's documented aclnn prototype, and each operator's own library exports
    its two entry points and no other operator's."""
    header = aclnn_prototypes(emitted_operators())
    assert ("aclnnStatus aclnnApplyProximalGradientDescentGetWorkspaceSize(const aclTensor *var, const aclTensor "
            "*alpha, const aclTensor *l1, const aclTensor *l2, const aclTensor *delta, aclTensor *varOut, uint64_t "
            "*workspaceSize, aclOpExecutor **executor);") in header
    assert ("aclnnSmoothL1LossGradV2GetWorkspaceSize(const aclTensor *predict, const aclTensor *label, const "
            "aclTensor *dout, double sigma, char *reduction, aclTensor *gradient, ") in header
    ctypes.CDLL(str(libs.acl))
    for op, path in libs.per_op.items():
        lib = ctypes.CDLL(str(path))
        exported = {other for other in INSTALL_ORDER
                    if hasattr(lib, f"aclnn{other}GetWorkspaceSize") and hasattr(lib, f"aclnn{other}")}
        assert exported == {op}


def _vendor_of(project: OperatorProject) -> str:
    """The vendor_name a project's build installs its package as (its CMakePresets.json)."""
    preset = json.loads(project_files(project)["CMakePresets.json"])
    return str(preset["configurePresets"][0]["cacheVariables"]["vendor_name"]["value"])


def _install_projects(tmp: Path, libs: FakeLibraries, ops: list[str], vendor: str | None = None) -> Path:
    """Stage each operator's package as its build does (its aclnn library alone and its build
    stamp, under the project's vendor or `vendor`) and install them in order into one OPP tree,
    over an earlier package of another vendor; returns the opp directory."""
    projects = {p.op_name: p for p in emitted_operators()}
    vendors = tmp / "opp" / "vendors"
    stage_package(tmp / "earlier", "customize", libs.per_op["ApplyProximalGradientDescent"])
    vendors.mkdir(parents=True)
    run_install(tmp / "earlier", vendors)
    for op in ops:
        project = projects[op]
        stamp = {installed_stamp_name(project.file_stem): build_stamp(project)}
        staging = stage_package(tmp / f"run_{op}", vendor or _vendor_of(project), libs.per_op[op], stamp)
        run_install(staging, vendors)
    return tmp / "opp"


def test_operators_installed_into_one_opp_tree_each_keep_their_aclnn_api(tmp_path: Path,
                                                                          libs: FakeLibraries) -> None:
    ctypes.CDLL(str(libs.acl))
    opp = _install_projects(tmp_path / "per_operator", libs, INSTALL_ORDER)
    assert load_priority(opp / "vendors" / "config.ini") == [
        *(vendor_name(op) for op in reversed(INSTALL_ORDER)), "customize"]
    search = find_packages(opp, "ASCEND_OPP_PATH", {})
    resolver = OpResolver(search, lambda note: None)
    for project in emitted_operators():
        entry = resolver.resolve(project.op_name)
        assert entry.package.root == opp / "vendors" / vendor_name(project.op_name)
        assert stamp_problem(entry.package.library, project.variants[0]) is None
    # what the projects' shared vendor did: the second package's library replaced the first's
    shared = _install_projects(tmp_path / "shared", libs, INSTALL_ORDER[:2], vendor="ascend_lowering")
    resolver = OpResolver(find_packages(shared, "ASCEND_OPP_PATH", {}), lambda note: None)
    assert resolver.resolve(INSTALL_ORDER[1]).package.root == shared / "vendors" / "ascend_lowering"
    with pytest.raises(BackendError, match=f"no installed custom-op package has aclnn{INSTALL_ORDER[0]}"):
        resolver.resolve(INSTALL_ORDER[0])


def test_a_vendor_installed_but_not_in_load_priority_is_named(tmp_path: Path, libs: FakeLibraries) -> None:
    ctypes.CDLL(str(libs.acl))
    opp = _install_projects(tmp_path, libs, ["SmoothL1LossGradV2", "AscendLoweringSmoothL1LossGrad"])
    (opp / "vendors" / "config.ini").write_text(f"load_priority={vendor_name('SmoothL1LossGradV2')},customize\n")
    resolver = OpResolver(find_packages(opp, "ASCEND_OPP_PATH", {}), lambda note: None)
    assert resolver.resolve("SmoothL1LossGradV2").package.root.name == vendor_name("SmoothL1LossGradV2")
    with pytest.raises(BackendError) as err:
        resolver.resolve("AscendLoweringSmoothL1LossGrad")
    vendor = vendor_name("AscendLoweringSmoothL1LossGrad")
    assert (f"{opp / 'vendors' / vendor} is installed, but vendors/config.ini's load_priority does not name "
            f"{vendor}, so CANN does not load it") in str(err.value)
    assert str(err.value).endswith(f"Build kernels/ascend_lowering_smooth_l1_loss_grad (build.sh) and install its "
                                   f"custom_opp_*.run, which installs as vendor {vendor}")


def test_a_library_that_cannot_load_names_what_it_misses(tmp_path: Path, libs: FakeLibraries) -> None:
    broken = install_package(tmp_path / "custom" / "broken", libs.opapi_needs_driver)
    (broken / "bin").mkdir()
    (broken / "bin" / "set_env.bash").write_text("export ASCEND_CUSTOM_OPP_PATH=...\n")
    with pytest.raises(BackendError) as err:
        OpResolver(PackageSearch((OpPackage(broken, "ASCEND_CUSTOM_OPP_PATH entry 1"),)), print).resolve(
            "SmoothL1LossGradV2")
    msg = str(err.value)
    assert "it needs libascend_hal.so, which the dynamic loader did not find" in msg
    assert f"source {broken}/bin/set_env.bash before starting Python" in msg
    home = make_toolkit(tmp_path / "Ascend" / "ascend-toolkit" / "latest", libs, acl=libs.acl_needs_driver)
    (tmp_path / "Ascend" / "ascend-toolkit" / "set_env.sh").write_text("export ASCEND_HOME_PATH=...\n")
    with pytest.raises(BackendError) as err:
        AclRuntime(find_toolkit({"ASCEND_HOME_PATH": str(home)}))
    msg = str(err.value)
    assert f"cannot load {home}/lib64/libascendcl.so: it needs libascend_hal.so" in msg
    assert f"(LD_LIBRARY_PATH does not include {home}/lib64)" in msg
    assert f"source {tmp_path}/Ascend/ascend-toolkit/set_env.sh before starting Python" in msg


@pytest.fixture(scope="module")
def artifacts() -> tuple:
    nodes = calls(np.random.default_rng(0))
    sl1, prox = nodes["sl1"], nodes["prox"]
    return artifact_for(sl1.spec, TARGET), artifact_for(prox.spec, TARGET), artifact_for(sl1.spec, "ascend910b")


def test_the_build_stamp_tells_whose_kernels_a_package_holds(tmp_path: Path, artifacts: tuple) -> None:
    sl1, prox, sl1_910b = artifacts
    sl1_call = calls(np.random.default_rng(0))["sl1"]
    lib = tmp_path / "libcust_opapi.so"
    stamp = tmp_path / installed_stamp_name(sl1.file_stem)
    assert "no build stamp" in (stamp_problem(lib, sl1) or "")
    stamp.write_text(build_stamp(project_of([sl1])))
    assert stamp_problem(lib, sl1) is None
    stamp.write_text(build_stamp(project_of([sl1_910b])))
    assert stamp_problem(lib, sl1) == "it was built for ascend910b, not ascend950"
    sum_spec = replace(sl1_call.spec, attrs={**sl1_call.spec.attrs, "reduction": "sum"})
    other = artifact_for(sum_spec, TARGET)
    stamp.write_text(build_stamp(project_of([other])))
    assert f"it lacks variant {sl1.variant_tag} ({sl1.variant_label})" in (stamp_problem(lib, sl1) or "")
    changed = json.loads(build_stamp(project_of([sl1])))
    changed["kernels"][str(sl1.key_base)] = "0" * 16  # the same variant from another kernel
    stamp.write_text(json.dumps(changed))
    assert "differs from the one lower generates" in (stamp_problem(lib, sl1) or "")
    stamp.write_text("not json")
    assert "is not one lower wrote" in (stamp_problem(lib, sl1) or "")
    assert "no build stamp" in (stamp_problem(lib, prox) or "")  # one stamp per operator


def test_the_emitted_project_installs_its_stamp_beside_its_aclnn_library(artifacts: tuple) -> None:
    project = project_of([artifacts[0]])
    files = project_files(project)
    assert files["build_stamp.json"] == build_stamp(project)
    cmake = files["op_host/CMakeLists.txt"]
    assert ("install(FILES ${CMAKE_SOURCE_DIR}/build_stamp.json DESTINATION ${VENDOR_DIR}/op_api/lib\n"
            "        RENAME smooth_l1_loss_grad_v2.build_stamp.json)") in cmake
    assert "install(TARGETS cust_opapi LIBRARY DESTINATION ${VENDOR_DIR}/op_api/lib)" in cmake

