"""The twin rejects every class of hardware-rule violation, loudly and by name.

Part 1 plants each violation in hand-written AscendC code (tests/twin/twin_rule_cases.h, one
library, one case per rule, chosen by its tiling data) beside a clean kernel that keeps every
rule. Part 2 feeds real emitted kernels corrupted plans (tile too big for the UB, tiles that do
not fill whole blocks, too few cores, a wrong tiling key, ...).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from twin_cases import PROX_SCALARS, Variant, feeds_of, model_of, prox_spec

from codegen.api import build_kernels
from codegen.targets import TARGETS
from lowering import fuse
from runtime.backend import BackendError
from runtime.backends.cpu import artifact_for, plan_tiles
from runtime.interpreter import KernelExecutionError, execute
from runtime.numerics import cast, sign
from runtime.twin.build import build
from runtime.twin.errors import TwinRuleError
from runtime.twin.library import GM_INPUT, GM_OUTPUT, GmArg, TargetRules, TwinLibrary
from runtime.twin.sources import snippet_sources

CASES = Path(__file__).with_name("twin_rule_cases.h").read_text()
CASE_IDS = ["CLEAN", "UB_OVERFLOW", "UB_ALIGNMENT", "UB_BOUNDS", "DATACOPY_LENGTH", "DATACOPYPAD_LENGTH",
            "COMPARE_COUNT", "ALLOC_FULL", "DEQUE_EMPTY", "ENQUE_DEPTH", "FREE_TWICE", "LEFT_ALLOCATED",
            "FREE_QUEUED", "USE_QUEUED", "USE_FREED", "PARTIAL_OVERLAP", "SIGN_OVERLAP", "CAST_OVERLAP",
            "SELECT_TEMP", "SIGN_TMP", "CAST_BF16_NONE", "CAST_UP_RINT", "CAST_SAME", "GM_BOUNDS",
            "GM_WRITE_INPUT", "HALF_WRITTEN", "WRITTEN_TWICE", "NEGATIVE_COUNT", "SELECT_MODE", "BF16_COMPARE",
            "INIT_TWICE"]
BROKEN = {
    "UB_OVERFLOW": "ub-overflow",
    "UB_ALIGNMENT": "ub-alignment",
    "UB_BOUNDS": "ub-bounds",
    "DATACOPY_LENGTH": "datacopy-length",
    "DATACOPYPAD_LENGTH": "datacopypad-params",
    "COMPARE_COUNT": "compare-count",
    "ALLOC_FULL": "queue-balance",
    "DEQUE_EMPTY": "queue-balance",
    "ENQUE_DEPTH": "queue-balance",
    "FREE_TWICE": "queue-balance",
    "LEFT_ALLOCATED": "queue-balance",
    "FREE_QUEUED": "queue-balance",
    "USE_QUEUED": "tensor-state",
    "USE_FREED": "tensor-state",
    "PARTIAL_OVERLAP": "overlap",
    "SIGN_OVERLAP": "overlap",
    "CAST_OVERLAP": "overlap",
    "SIGN_TMP": "sign-tmp",
    "CAST_BF16_NONE": "cast-mode",
    "CAST_UP_RINT": "cast-mode",
    "CAST_SAME": "cast-same-type",
    "GM_BOUNDS": "gm-bounds",
    "GM_WRITE_INPUT": "gm-write",
    "HALF_WRITTEN": "gm-coverage",
    "NEGATIVE_COUNT": "count",
    "SELECT_MODE": "select-mode",
    "INIT_TWICE": "init-buffer",
}


def test_case_ids_follow_the_cpp_enum():
    body = CASES[CASES.index("enum CaseId"):CASES.index("};", CASES.index("enum CaseId"))]
    assert [w.strip(" ,") for w in body.split("{")[1].split() if w.strip(" ,")] == CASE_IDS


@pytest.fixture(scope="module")
def cases_lib(toolchain) -> TwinLibrary:
    return TwinLibrary(build(snippet_sources(CASES, "rule_cases", 2, "RuleCaseTiling"), toolchain, "rule_cases"),
                       "rule_cases")


def launch(lib: TwinLibrary, case: str, target: str, n: int = 1000, block_dim: int = 1, key: int = 0,
           extra: int = 0, x: np.ndarray | None = None, tiling: bytes | None = None) -> np.ndarray:
    t = TARGETS[target]
    x = np.linspace(-3, 3, n, dtype=np.float32) if x is None else x
    y = np.empty(x.size, np.float32)
    data = struct.pack("<iii", CASE_IDS.index(case), x.size, extra) if tiling is None else tiling
    lib.launch([GmArg("x", x, GM_INPUT), GmArg("y", y, GM_OUTPUT)], data, key, block_dim, 0,
               TargetRules(t.ub_bytes, t.select_scratch_bytes, t.npu_arch))
    return y


@pytest.mark.parametrize("target", list(TARGETS))
def test_clean_kernel_keeps_every_rule_and_computes_with_ir_numerics(cases_lib, target, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3, 1000).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 70000.0, -65520.0]
    y = launch(cases_lib, "CLEAN", target, x=x)
    with np.errstate(invalid="ignore"):
        picked = np.where(x >= 0, sign(x), x).astype(np.float32)
    want = cast(cast(picked, "float16"), "float32") * np.float32(2)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_planted_violation_is_rejected_by_rule(cases_lib, case):
    with pytest.raises(TwinRuleError) as err:
        launch(cases_lib, case, "ascend910b")
    assert err.value.rule == BROKEN[case], str(err.value)
    assert "\n" not in str(err.value) and f"rule {BROKEN[case]}" in str(err.value)


def test_output_written_twice_is_rejected(cases_lib):
    with pytest.raises(TwinRuleError, match=r"written twice \(blocks 0 and 1\)") as err:
        launch(cases_lib, "WRITTEN_TWICE", "ascend950", n=64, block_dim=2)
    assert err.value.rule == "gm-coverage"


def test_tiling_key_that_selects_no_branch_is_rejected(cases_lib):
    with pytest.raises(TwinRuleError) as err:
        launch(cases_lib, "CLEAN", "ascend950", key=9)
    assert err.value.rule == "tiling-key"


def test_tiling_data_shorter_than_the_struct_is_rejected(cases_lib):
    with pytest.raises(TwinRuleError) as err:
        launch(cases_lib, "CLEAN", "ascend950", tiling=struct.pack("<i", 0))
    assert err.value.rule == "tiling-size"


def test_select_temp_space_is_a_rule_only_where_the_target_needs_it(cases_lib):
    almost_all = TARGETS["ascend910b"].ub_bytes - 4096
    with pytest.raises(TwinRuleError) as err:
        launch(cases_lib, "SELECT_TEMP", "ascend910b", n=0, extra=almost_all)
    assert err.value.rule == "select-temp"
    launch(cases_lib, "SELECT_TEMP", "ascend950", n=0, extra=almost_all)


def test_bfloat16_compare_is_a_950_feature(cases_lib):
    with pytest.raises(TwinRuleError) as err:
        launch(cases_lib, "BF16_COMPARE", "ascend910_93", n=0)
    assert err.value.rule == "dtype"
    launch(cases_lib, "BF16_COMPARE", "ascend950", n=0)


def test_the_lowest_failing_block_is_reported(cases_lib):
    with pytest.raises(TwinRuleError) as err:
        launch(cases_lib, "UB_OVERFLOW", "ascend950", block_dim=3)
    assert err.value.block == 0 and "in block 0" in str(err.value)


# ------------------------------------------------------------------ corrupted plans, real kernels

@pytest.fixture(scope="module")
def sl1_kernel(twin):
    """SmoothL1 float32 with a full-shape dout on ascend910b: Compare, Select, Sign, queues."""
    v = Variant("sl1", "float32", "mean", False, 0.5)
    art = build_kernels(fuse(model_of(v, (256,)))[0], "ascend910b")[0]
    return twin.kernel(art), v


def _inputs(v, n):
    feeds = feeds_of(v, (n,), np.random.default_rng(1))
    return {k: np.asarray(a).reshape(-1) for k, a in feeds.items()}


def _run_corrupted(kernel, v, n: int, **changes):
    inputs = _inputs(v, n)
    tiling = kernel.plan_tiling(kernel.art.schedule(n), inputs).with_fields(**changes)
    return kernel.run(inputs, tiling)


def test_the_uncorrupted_plan_runs(sl1_kernel):
    kernel, v = sl1_kernel
    outs, stats = _run_corrupted(kernel, v, 100_000)
    assert outs["gradient"].size == 100_000 and stats.gm_write_bytes == 400_000


@pytest.mark.parametrize(("changes", "rule"), [
    ({"tile_elems": 16384}, "ub-overflow"),
    ({"tile_elems": 200}, "ub-bounds"),
    ({"block_dim": 40}, "gm-coverage"),
    ({"block_factor": 1024}, "gm-coverage"),
    ({"num_elements": 100_032}, "gm-bounds"),
    ({"tiling_key": 3}, "tiling-key"),
], ids=["tile-over-ub", "tile-not-whole-repeats", "too-few-cores", "cores-too-small", "too-many-elements",
        "unknown-key"])
def test_corrupted_plan_is_rejected(sl1_kernel, changes, rule):
    kernel, v = sl1_kernel
    with pytest.raises(TwinRuleError) as err:
        _run_corrupted(kernel, v, 100_000, **changes)
    assert err.value.rule == rule, str(err.value)


def test_tile_that_fills_the_select_temp_space_is_rejected(sl1_kernel):
    kernel, v = sl1_kernel
    plan = kernel.art.schedule(100_000)
    per_tile = sum(b.count * b.bytes for b in plan.buffers) / plan.tile_elems  # UB bytes per element
    fits_without_temp = int((plan.ub_limit - 768 - 4096) / per_tile) // 256 * 256
    assert (fits_without_temp * per_tile + 768 > plan.ub_limit - 8192)
    with pytest.raises(TwinRuleError) as err:
        _run_corrupted(kernel, v, 100_000, tile_elems=fits_without_temp)
    assert err.value.rule == "select-temp"


def test_tile_of_partial_blocks_is_rejected_on_a_half_kernel(twin):
    v = Variant("prox", "float16", runtime_scalars=False)
    kernel = twin.kernel(build_kernels(fuse(model_of(v, (256,)))[0], "ascend950")[0])
    inputs = {k: np.asarray(a).reshape(-1) for k, a in feeds_of(v, (5000,), np.random.default_rng(2)).items()}
    inputs.update({n: np.array([s], np.float32) for n, s in zip(("alpha", "l1", "l2"), PROX_SCALARS)})
    tiling = kernel.plan_tiling(kernel.art.schedule(5000), inputs).with_fields(tile_elems=72)
    with pytest.raises(TwinRuleError) as err:
        kernel.run(inputs, tiling)
    assert err.value.rule == "datacopy-length" and "144 bytes" in str(err.value)


def test_host_tiling_that_disagrees_with_the_scheduler_is_reported(sl1_kernel):
    kernel, v = sl1_kernel
    inputs = _inputs(v, 100_000)
    host = kernel.host_tiling(inputs)
    planned = kernel.plan_tiling(kernel.art.schedule(100_000), inputs)
    kernel.check_host_tiling(host, planned)
    with pytest.raises(BackendError, match=f"tileElems = {host.tile_elems}, codegen.s scheduler 512"):
        kernel.check_host_tiling(host, planned.with_fields(tile_elems=512))
    wrong_scalar = tuple((i, val * 2) for i, val in planned.scalars)
    with pytest.raises(BackendError, match="host scalar"):
        kernel.check_host_tiling(host, planned.with_fields(scalars=wrong_scalar))


def _prox_call(n_var: int, n_delta: int, l2: np.ndarray | None = None) -> tuple:
    spec = prox_spec("float32", ("float32",) * 3, "raw", float("inf"), n_var)
    scalar = {r: np.asarray(v, np.float32) for r, v in zip(("alpha", "l1", "l2"), PROX_SCALARS)}
    if l2 is not None:
        scalar["l2"] = l2
    inputs = {"var": np.linspace(-1, 1, n_var, dtype=np.float32), "delta": np.ones(n_delta, np.float32), **scalar}
    return artifact_for(spec, "ascend910b"), inputs


def test_buffers_back_to_back_are_each_its_own(twin):
    """A scalar placed right after var (as an allocator's arena places it) is read as the scalar:
    the address one past var's end starts alpha's bytes."""
    art, inputs = _prox_call(64, 64)
    arena = np.zeros(64 + 3 + 64, np.float32)
    at = 0
    for name in ("var", "alpha", "l1", "l2", "delta"):
        size = inputs[name].size
        arena[at:at + size] = inputs[name].reshape(-1)
        inputs[name] = arena[at:at + size].reshape(inputs[name].shape)
        at += size
    kernel = twin.kernel(art)
    out, _ = kernel.run(inputs, kernel.host_tiling(inputs))
    plan = art.schedule(64)
    want = execute(art.kernel, plan_tiles(plan), inputs, 64, alloc=art.allocation)
    assert np.array_equal(out["var_out"], want["var_out"])


@pytest.mark.parametrize(("n_delta", "l2", "message"), [
    (90, None, r"(reads|binds) 144 bytes at offset 256 of GM buffer delta, which holds 360 bytes"),
    (100, np.zeros(0, np.float32),
     r"(GetValue reads|SetGlobalBuffer binds) 4 bytes at offset 0 of GM buffer l2, which holds 0 bytes"),
])
def test_the_cpu_backend_and_the_twin_refuse_one_gm_access(twin, n_delta, l2, message):
    """A launch whose delta is shorter than its plan, or whose scalar holds no element: the twin
    (plan's tiling, past the host tiling's own checks) and the CPU backend's interpreter both stop
    at the access (the twin already where the core binds delta), rule gm-bounds, with the same
    kind of message."""
    art, inputs = _prox_call(100, n_delta, l2)
    plan = art.schedule(100)
    kernel = twin.kernel(art)
    with pytest.raises(TwinRuleError, match=f"gm-bounds.*{message}"):
        kernel.run(inputs, kernel.plan_tiling(plan, {**inputs, "l2": np.ones(1, np.float32)}))
    with pytest.raises(KernelExecutionError, match=f"rule gm-bounds: .*{message}"):
        execute(art.kernel, plan_tiles(plan), inputs, 100, alloc=art.allocation)
