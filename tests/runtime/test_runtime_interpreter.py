"""A scheduling or buffer bug must show up on the CPU backend as an error or a wrong result."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from codegen.api import kernel_for_spec
from codegen.buffers import allocate
from codegen.ir import Op
from codegen.nodes import InputSpec, NodeSpec
from codegen.schedule import make_plan
from codegen.targets import get_target
from contracts.fused_ops import SMOOTH_L1_GRAD, smooth_l1_grad_reference
from runtime.backends.cpu import plan_tiles
from runtime.interpreter import KernelExecutionError, Tile, execute
from runtime.precision import compare

N = 100_003


@pytest.fixture(scope="module")
def setup():
    spec = NodeSpec("n", SMOOTH_L1_GRAD, {r: InputSpec("float32", (N,)) for r in ("predict", "label", "dout")},
                    {"sigma": 1.0, "reduction": "sum", "scale": 1.0})
    kernel = kernel_for_spec(spec)
    alloc = allocate(kernel)
    plan = make_plan(kernel, alloc, get_target("ascend910b"), N)
    rng = np.random.default_rng(0)
    inputs = {r: rng.normal(0, 2, N).astype(np.float32) for r in ("predict", "label", "dout")}
    golden = smooth_l1_grad_reference(inputs["predict"], inputs["label"], inputs["dout"], 1.0, "sum")
    return kernel, alloc, plan, inputs, golden.astype(np.float32)


def _buffers(plan):
    return {b.name: b.bytes for b in plan.buffers}


def test_the_plan_as_made_gives_the_right_result(setup):
    kernel, alloc, plan, inputs, golden = setup
    assert plan.block_dim > 1 and any(n < plan.tile_elems for c in range(plan.block_dim) for _, n in plan.tiles(c))
    out = execute(kernel, plan_tiles(plan), inputs, N, alloc=alloc, buffer_bytes=_buffers(plan))["gradient"]
    assert compare("g", out, golden).passed


@pytest.mark.parametrize("bug,message", [
    (lambda p: dataclasses.replace(p, block_dim=p.block_dim - 1), "written by no tile"),
    (lambda p: dataclasses.replace(p, block_factor=p.block_factor - 64), "written by no tile"),
    (lambda p: dataclasses.replace(p, num_elements=p.num_elements + 64), "outside"),
])
def test_a_wrong_core_split_is_an_error(setup, bug, message):
    kernel, alloc, plan, inputs, _ = setup
    with pytest.raises(KernelExecutionError, match=message):
        execute(kernel, plan_tiles(bug(plan)), inputs, N, alloc=alloc, buffer_bytes=_buffers(plan))


def test_overlapping_tiles_are_an_error(setup):
    kernel, alloc, plan, inputs, _ = setup
    tiles = plan_tiles(plan)
    t = tiles[3]
    tiles[3] = Tile(t.core, t.index, t.offset - 64, t.length)
    with pytest.raises(KernelExecutionError, match="already wrote"):
        execute(kernel, tiles, inputs, N, alloc=alloc)


def test_buffers_smaller_than_a_tile_are_an_error(setup):
    kernel, alloc, plan, inputs, _ = setup
    halved = {name: size // 2 for name, size in _buffers(plan).items()}
    with pytest.raises(KernelExecutionError, match="need .* bytes in buffer"):
        execute(kernel, plan_tiles(plan), inputs, N, alloc=alloc, buffer_bytes=halved)


def test_two_live_values_in_one_slot_give_a_wrong_result(setup):
    kernel, alloc, plan, inputs, golden = setup
    sign = next(i for i, ins in enumerate(kernel.instrs) if ins.op is Op.SIGN)
    x = kernel.instrs[sign].srcs[0]
    assert any(x in ins.srcs for ins in kernel.instrs[sign + 1:])  # x is still live when Sign runs
    slots = list(alloc.value_slot)
    slots[sign] = slots[x]  # a buggy allocator: Sign overwrites x
    broken = dataclasses.replace(alloc, value_slot=tuple(slots))
    out = execute(kernel, plan_tiles(plan), inputs, N, alloc=broken, buffer_bytes=_buffers(plan))["gradient"]
    assert not compare("g", out, golden).passed


def test_pad_lanes_never_reach_memory(setup):
    kernel, alloc, _, inputs, golden = setup
    # tiles of 100 elements compute over 128 lanes whose pad holds NaN: none may be stored
    tiles = [Tile(0, k, off, min(100, N - off)) for k, off in enumerate(range(0, N, 100))]
    out = execute(kernel, tiles, inputs, N, alloc=alloc)["gradient"]
    assert not np.isnan(out).any() and compare("g", out, golden).passed
