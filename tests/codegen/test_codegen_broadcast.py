"""Broadcast loads in codegen: the layout against numpy's broadcasting, the IR's broadcast inputs,
and what the plan charges for them (codegen/broadcast.py, codegen/schedule.py)."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.broadcast import BroadcastError, layout
from codegen.ir import IRError, KernelBuilder, Kind, Op, format_kernel, parse_kernel
from codegen.nodes import InputSpec, NodeSpec
from codegen.schedule import TILE_ALIGN, PlanError
from contracts.fused_ops import SMOOTH_L1_GRAD


def _numpy_index(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(in_shape))
    return np.broadcast_to(np.arange(n).reshape(in_shape), out_shape).reshape(-1)


def _random_pair(rng: np.random.Generator, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    out = tuple(int(d) for d in rng.integers(1, 6, rank))
    keep = int(rng.integers(0, rank + 1))  # the input's rank: its trailing dims, some set to 1
    tail = out[rank - keep:]
    return tuple(1 if rng.random() < 0.5 else d for d in tail), out


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 8])
def test_layout_reads_what_numpy_broadcasting_reads(rank: int, rng: np.random.Generator) -> None:
    for _ in range(25):
        in_shape, out_shape = _random_pair(rng, rank)
        lay = layout(in_shape, out_shape)
        flat = np.arange(int(np.prod(out_shape)))
        assert np.array_equal(lay.source_index(flat), _numpy_index(in_shape, out_shape)), (in_shape, out_shape)
        # the window bound holds for every tile start
        for tile in (TILE_ALIGN, 3 * TILE_ALIGN):
            for first in range(0, flat.size, max(7, flat.size // 40)):
                src = lay.source_index(np.arange(first, min(first + tile, flat.size)))
                base = first // lay.period * lay.shift
                assert src.min() >= base and src.max() < base + lay.window_elems(tile), (in_shape, out_shape, first)


@pytest.mark.parametrize("in_shape, out_shape, dims, strides", [
    ((5,), (3, 5), (3, 5), (0, 1)),  # a row: period 5, no shift
    ((3, 1), (3, 5), (3, 5), (1, 0)),  # a column
    ((1, 1), (3, 5), (15,), (0,)),  # one element: every lane the same
    ((), (3, 5), (15,), (0,)),
    ((3, 5), (3, 5), (15,), (1,)),  # equal shapes: the identity
    ((1, 4, 1, 6), (2, 4, 3, 6), (2, 4, 3, 6), (0, 6, 0, 1)),
    ((4, 1, 1), (2, 4, 3, 6), (2, 4, 18), (0, 1, 0)),  # the 1s of the input merge
    ((1,), (0, 3), (0,), (0,)),  # an empty output: one dim of 0 elements
])
def test_layout_merges_dims_the_input_walks_as_one(in_shape, out_shape, dims, strides) -> None:
    lay = layout(in_shape, out_shape)
    assert (lay.dims, lay.strides) == (dims, strides)


@pytest.mark.parametrize("in_shape, out_shape", [((3,), (3, 4)), ((2, 4), (3, 4)), ((2, 3, 4), (3, 4)),
                                                 ((1,) * 9, (1,) * 9)])
def test_layout_refuses_what_does_not_broadcast_to_the_output(in_shape, out_shape) -> None:
    with pytest.raises(BroadcastError):
        layout(in_shape, out_shape)


def _spec(dtype: str, predict, label, dout, reduction: str = "mean", sigma: float = 0.5) -> NodeSpec:
    return NodeSpec("n", SMOOTH_L1_GRAD, {"predict": InputSpec(dtype, predict), "label": InputSpec(dtype, label),
                                          "dout": InputSpec(dtype, dout)},
                    {"sigma": sigma, "reduction": reduction, "scale": 1.0})


def test_a_broadcast_label_and_dout_are_broadcast_loads_and_round_trip_as_text() -> None:
    k = kernel_for_spec(_spec("float16", (8, 300), (300,), (8, 1)))
    assert dict(k.variant)["label"] == "broadcast" and dict(k.variant)["dout"] == "broadcast"
    assert [p.broadcast for p in k.inputs] == [False, True, True]
    assert sum(ins.op.value == "CopyInBcast" for ins in k.instrs) == 2
    assert "input label: float16 tile broadcast" in format_kernel(k)
    assert parse_kernel(format_kernel(k)) == k
    # fast paths stay: a label of predict's shape is a plain load, a one-element dout a scalar
    fast = kernel_for_spec(_spec("float16", (8, 300), (8, 300), ()))
    assert dict(fast.variant)["label"] == "tile" and dict(fast.variant)["dout"] == "scalar"
    assert not any(ins.op.value == "CopyInBcast" for ins in fast.instrs)
    # a label of predict's element count that broadcasts is a plain load too: element i reads i
    same = kernel_for_spec(_spec("float32", (1, 300), (300,), ()))
    assert dict(same.variant)["label"] == "tile"


def test_the_verifier_keeps_broadcast_inputs_to_broadcast_loads() -> None:
    b = KernelBuilder("Op", "float32")
    b.input("x", "float32", broadcast=True)
    b.output("y", "float32")
    v = b.copy_in("x")
    b.copy_out("y", b.binary(Op.ADD, v, v))
    with pytest.raises(IRError, match="is a broadcast input"):
        b.build()
    b = KernelBuilder("Op", "float32")
    b.input("x", "float32", Kind.SCALAR, broadcast=True)
    b.output("y", "float32")
    with pytest.raises(IRError, match="broadcast input 'x' must be a tile input"):
        b.build()


def test_the_plan_charges_the_table_and_window_of_a_broadcast_input() -> None:
    n_rows, row = 4096, 300
    plain = artifact_for_target(kernel_for_spec(_spec("float32", (n_rows, row), (n_rows, row), ())), "ascend910b")
    bcast = artifact_for_target(kernel_for_spec(_spec("float32", (n_rows, row), (row,), ())), "ascend910b")
    shapes = {"predict": (n_rows, row), "label": (row,), "dout": ()}
    plan = bcast.schedule(n_rows * row, shapes)
    assert plan.broadcasts[0].layout.tabled
    names = {b.name: b for b in plan.buffers}
    assert names["table_label"].bytes == -(-(row + plan.tile_elems) * 4 // 32) * 32
    # the row is all a tile reads; the buffer holds a tile, as a Gather's count may not exceed it
    assert plan.broadcasts[0].window_elems == row
    assert names["window_label"].bytes == -(-max(row, plan.tile_elems) * 4 // 32) * 32
    assert {"bcast_iota", "bcast_offsets"} <= set(names)
    assert plan.ub_bytes <= plan.ub_limit - 8192
    # the same launch with a label of predict's shape streams it: no offset buffers
    assert not {"bcast_iota", "table_label"} & {b.name for b in plain.schedule(n_rows * row).buffers}


def test_a_period_too_long_for_a_table_takes_the_general_path() -> None:
    art = artifact_for_target(kernel_for_spec(_spec("float16", (4, 200_000), (4, 1), ())), "ascend950")
    plan = art.schedule(800_000, {"predict": (4, 200_000), "label": (4, 1), "dout": ()})
    b, = plan.broadcasts
    assert not b.layout.tabled and (b.table_elems, b.window_elems) == (0, 0)
    assert not any(x.name.startswith(("table_", "window_", "bcast_")) for x in plan.buffers)


def test_a_plan_without_the_shapes_of_its_broadcast_inputs_is_refused() -> None:
    art = artifact_for_target(kernel_for_spec(_spec("float32", (4, 8), (8,), ())), "ascend950")
    with pytest.raises(PlanError, match="needs the input shapes"):
        art.schedule(32)
    with pytest.raises(PlanError, match="does not broadcast"):
        art.schedule(32, {"predict": (4, 8), "label": (3,), "dout": ()})
