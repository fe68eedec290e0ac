"""Broadcast loads on the twin: both paths of the emitted kernel (the period table, and the general
path's scalar loop for long periods) bit for bit against the CPU backend, and broadcast tilings the
kernel cannot honour: a table too short fails on a hardware rule, a window too short reads lanes
the DMA never loaded."""

from __future__ import annotations

import numpy as np
import pytest
from twin_cases import differing, mixed

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.broadcast import MAX_RANK
from codegen.nodes import InputSpec, NodeSpec
from codegen.project import project_of
from contracts.fused_ops import SMOOTH_L1_GRAD
from runtime.backend import KernelCall
from runtime.backends.cpu import plan_tiles
from runtime.interpreter import execute
from runtime.twin.errors import TwinRuleError
from runtime.twin.kernel import TwinKernel

TARGET = "ascend910b"


def _call(shapes, dtype: str, rng: np.random.Generator) -> KernelCall:
    x = {r: mixed(rng, s, dtype, 0.5) for r, s in zip(("predict", "label", "dout"), shapes)}
    if not shapes[2]:  # a one-element dout of an edge value (NaN, say) would hide every other lane
        x["dout"] = np.asarray(0.75, x["dout"].dtype)
    spec = NodeSpec("n", SMOOTH_L1_GRAD, {r: InputSpec(dtype, s) for r, s in zip(("predict", "label", "dout"), shapes)},
                    {"sigma": 0.5, "reduction": "sum", "scale": 1.0})
    return KernelCall(spec, x, TARGET)


@pytest.mark.parametrize("shapes, tabled", [
    (((300, 77), (77,), (300, 1)), True),  # a row label, a column dout: the period table
    (((300, 7), (1, 1), (300, 1)), True),  # a one-element label broadcast like any other
    (((2, 5, 3, 4, 67), (5, 1, 4, 1), (3, 1, 67)), True),  # rank 5
    (((3, 60000), (3, 1), ()), False),  # a column of long rows: the general path
], ids=["period-table", "one-element-label", "rank-5", "general-path"])
def test_both_paths_match_the_cpu_backend_bit_for_bit(twin, cpu, shapes, tabled, rng) -> None:
    call = _call(shapes, "float16", rng)
    got = twin.run(call)["gradient"]
    want = cpu.run(call)["gradient"]
    assert got.shape == shapes[0] and differing(got, want).size == 0
    plan = twin.plan(artifact_for_target(kernel_for_spec(call.spec), TARGET), got.size, "n",
                     {r: tuple(s) for r, s in zip(("predict", "label", "dout"), shapes)})
    assert all(b.layout.tabled == tabled for b in plan.broadcasts)


TABLE = 1 + 2 * MAX_RANK + 2  # the tiling entry: rank, dims, strides, period, shift, then the table
WINDOW = TABLE + 1


def test_broadcast_tilings_the_kernel_cannot_honour(twin, cpu, rng) -> None:
    shapes = ((640, 30), (640, 1), ())  # a column: a core's tile reads about 448 / 30 label elements
    call = _call(shapes, "float32", rng)
    kernel = twin.kernel(artifact_for_target(kernel_for_spec(call.spec), TARGET))
    plan = kernel.art.schedule(640 * 30, dict(zip(("predict", "label", "dout"), shapes)))
    good = kernel.plan_tiling(plan, call.inputs)
    entry, = good.broadcasts
    want = cpu.run(call)["gradient"].reshape(-1)
    got, _ = kernel.run(call.inputs, good)
    assert differing(got["gradient"], want).size == 0
    short_table = entry[:TABLE] + (450,) + entry[TABLE + 1:]  # a core's 448 lanes from p0 up to 28
    with pytest.raises(TwinRuleError) as err:
        kernel.run(call.inputs, good.with_fields(broadcasts=(short_table,)))
    assert err.value.rule == "ub-bounds", str(err.value)
    short_window = entry[:WINDOW] + (1,) + entry[WINDOW + 1:]
    got, _ = kernel.run(call.inputs, good.with_fields(broadcasts=(short_window,)))
    assert differing(got["gradient"], want).size > 0


def test_a_package_of_broadcast_variants_serves_inputs_of_predicts_shape(toolchain, rng) -> None:
    """A package built for shapes known only at run time may hold only the broadcast variant; a call
    whose label has predict's shape and whose dout holds one element runs it, with the values the
    IR gives for these inputs."""
    shapes = ((64, 40), (64, 1), (40,))
    art = artifact_for_target(kernel_for_spec(_call(shapes, "float32", rng).spec), TARGET)
    kernel = TwinKernel(art, toolchain, project_of([art]))
    inputs = {"predict": mixed(rng, (64, 40), "float32", 0.5), "label": mixed(rng, (64, 40), "float32", 0.5),
              "dout": np.array([0.75], np.float32)}
    host = kernel.host_tiling(inputs)
    assert host.tiling_key & ~0x100 == art.key_base
    plan = art.schedule(64 * 40, {r: v.shape for r, v in inputs.items()})
    kernel.check_host_tiling(host, kernel.plan_tiling(plan, inputs))
    got, _ = kernel.run(inputs, host)
    want = execute(art.kernel, plan_tiles(plan), inputs, 64 * 40, alloc=art.allocation, broadcasts=plan.broadcasts)
    assert differing(got["gradient"], want["gradient"]).size == 0
