"""Scheduler and plan checker: every kernel variant x target over random and edge sizes."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.api import KernelArtifact, kernel_for_spec
from codegen.buffers import allocate
from codegen.nodes import InputSpec, NodeSpec
from codegen.schedule import TILE_ALIGN, UB_RESERVE_BYTES, Plan, PlanError, check_plan, make_plan
from codegen.targets import TARGETS, get_target


def _variants() -> list[NodeSpec]:
    out = []
    for dt, red, scalar_dout in itertools.product(
        ("float32", "float16", "bfloat16"), ("none", "mean"), (True, False)
    ):
        inputs = {r: InputSpec(dt, ("N",)) for r in ("predict", "label")}
        inputs["dout"] = InputSpec(dt, () if scalar_dout else ("N",))
        out.append(NodeSpec("n", "SmoothL1LossGradV2", inputs, {"sigma": 0.5, "reduction": red, "scale": 1.0}))
    for dt, consts in itertools.product(("float32", "float16", "bfloat16"),
                                        ({}, {"alpha": 0.1, "l1": 0.01, "l2": 0.1})):
        inputs = {"var": InputSpec(dt, ("N",)), "delta": InputSpec(dt, ("N",))}
        inputs.update({r: InputSpec(dt, (), consts.get(r)) for r in ("alpha", "l1", "l2")})
        out.append(NodeSpec("n", "ApplyProximalGradientDescent", inputs, {"scalar_form": "raw"}))
    return out


ARTIFACTS = [
    KernelArtifact(k, get_target(t), ("n",), allocate(k))
    for k in (kernel_for_spec(s) for s in _variants())
    for t in TARGETS
]
EDGE_SIZES = sorted(
    {0, 1, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 2**31 - 1, 2**31, 2**31 + 1, 2**33 + 17}
    | {2**k + d for k in range(4, 32, 3) for d in (-1, 0, 1)}
)


@pytest.mark.parametrize("n", EDGE_SIZES)
def test_edge_sizes_every_variant(n: int) -> None:
    for art in ARTIFACTS:
        plan = art.schedule(n)  # schedule() runs check_plan
        assert plan.ub_bytes <= art.target.ub_bytes
        if n:
            assert plan.tile_elems % TILE_ALIGN == 0
            assert sum(plan.core_range(c)[1] for c in range(plan.block_dim)) == n


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    art=st.sampled_from(ARTIFACTS),
    n=st.one_of(
        st.integers(0, 5000),
        st.integers(0, 2**26),
        st.integers(2**31 - 4096, 2**33),
        st.integers(1, 40).map(lambda k: 2**k).flatmap(lambda p: st.sampled_from([p - 1, p, p + 1])),
    ),
)
def test_plans_for_random_sizes(art: KernelArtifact, n: int) -> None:
    plan = art.schedule(n)
    if n:
        # walk every tile of small launches: each element exactly once, tails only at core ends
        if n <= 200_000:
            seen = bytearray(n)
            for c in range(plan.block_dim):
                for off, cnt in plan.tiles(c):
                    assert Plan.compute_count(cnt) <= plan.tile_elems
                    for i in range(off, off + cnt):
                        seen[i] += 1
            assert seen == bytearray([1]) * n
        assert plan.buffer_num in (1, 2)
        assert plan.block_dim <= art.target.aiv_cores


def test_double_buffering_only_when_a_core_has_more_than_one_tile() -> None:
    art = ARTIFACTS[0]
    small = art.schedule(art.target.aiv_cores * 64)
    big = art.schedule(2**26)
    assert small.buffer_num == 1 and small.tiling_key & 0x100 == 0
    assert big.buffer_num == 2 and big.tiling_key & 0x100
    assert big.tile_count(0) > 1


def test_tiling_key_encodes_dtype_and_buffering() -> None:
    keys = {(a.kernel.dtype, a.schedule(2**26).tiling_key) for a in ARTIFACTS}
    assert ("float32", 256) in keys and ("float16", 257) in keys and ("bfloat16", 283) in keys


def test_ub_per_element_and_tile_size_track_each_other() -> None:
    for art in ARTIFACTS:
        plan = art.schedule(2**30)
        per_elem = art.allocation.bytes_per_element(plan.buffer_num)
        assert plan.ub_bytes - plan.fixed_bytes == pytest.approx(per_elem * plan.tile_elems)
        # no room left for one more TILE_ALIGN block of tile
        assert plan.ub_bytes + per_elem * TILE_ALIGN > art.target.ub_bytes - UB_RESERVE_BYTES or plan.tile_count(0) == 1


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("tile_elems", 1000, "buffers|multiple"),
        ("block_factor", 4096 + 64, "cover|core"),
        ("ub_bytes", 10**6, "buffers|UB"),
        ("tiling_key", 7, "tiling key"),
        ("num_elements", 2**20 + 1, "cover|range"),
        ("block_dim", 3, "cover|core"),
    ],
)
def test_checker_catches_broken_plans(field: str, value: int, message: str) -> None:
    art = ARTIFACTS[0]
    plan = art.schedule(2**20)
    broken = dataclasses.replace(plan, **{field: value})
    with pytest.raises(PlanError, match=message):
        check_plan(broken, art.kernel, art.allocation, art.target)


def test_checker_catches_ub_overflow_and_wrong_target() -> None:
    art = ARTIFACTS[0]
    plan = art.schedule(2**20)
    huge = make_plan(art.kernel, art.allocation, art.target, 2**20)
    huge = dataclasses.replace(huge, tile_elems=huge.tile_elems * 8)
    huge = dataclasses.replace(
        huge, buffers=tuple(dataclasses.replace(b, bytes=b.bytes * 8) for b in huge.buffers),
        ub_bytes=huge.fixed_bytes + sum(b.count * b.bytes * 8 for b in huge.buffers),
    )
    with pytest.raises(PlanError):
        check_plan(huge, art.kernel, art.allocation, art.target)
    other = next(t for t in TARGETS.values() if t.ub_bytes != art.target.ub_bytes)
    with pytest.raises(PlanError, match="target"):
        check_plan(plan, art.kernel, art.allocation, other)


def test_bad_sizes_are_refused() -> None:
    art = ARTIFACTS[0]
    for bad in (-1, 2**63, 1.5):
        with pytest.raises(PlanError):
            art.schedule(bad)  # type: ignore[arg-type]
