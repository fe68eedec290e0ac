"""One operator project with every variant of its op type, compiled once: for each variant's call
the emitted tiling function picks that variant's key (from the attributes, dtypes and dout's
element count), and the kernel entry runs it with the same result as the variant alone and as
the IR interpreter (on ascend910b, with Sign emitted as Compare/Select/Add)."""

from __future__ import annotations

import numpy as np
import pytest
from twin_cases import PROX_SCALARS, differing, mixed, model_of, variants

from codegen.api import build_kernels
from codegen.ir import Kind
from codegen.project import operator_projects
from lowering import fuse
from runtime.backend import BackendError
from runtime.backends.cpu import plan_tiles
from runtime.interpreter import execute
from runtime.numerics import NUMPY_DTYPES
from runtime.twin.kernel import TwinKernel

TARGET = "ascend910b"
N = 5_000
COLS = 40  # a kernel with broadcast inputs runs on [N / COLS, COLS], its broadcast inputs rows [COLS]


@pytest.fixture(scope="module")
def projects():
    arts = {}
    for v in variants():
        for art in build_kernels(fuse(model_of(v, (N,)))[0], TARGET):
            arts.setdefault((art.op_name, art.key_base), art)
    return operator_projects(list(arts.values()))


def _shapes(art) -> dict[str, tuple[int, ...]] | None:
    if not any(p.broadcast for p in art.kernel.inputs):
        return None
    return {p.name: (COLS,) if p.broadcast else (N // COLS, COLS) for p in art.kernel.inputs}


def _inputs(art, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Edge-laden streamed inputs; scalars (dout, alpha, l1, l2) of one element."""
    scalars = dict(zip(("alpha", "l1", "l2"), PROX_SCALARS), dout=0.75)
    shapes = _shapes(art) or {}
    out = {}
    for p in art.kernel.inputs:
        if p.kind is Kind.TILE:
            out[p.name] = mixed(rng, shapes.get(p.name, (N,)), p.dtype, 0.5)
        else:
            out[p.name] = np.asarray([scalars[p.name]], NUMPY_DTYPES[p.dtype])
    return out


def test_each_variant_of_the_whole_operator_runs_as_alone(projects, toolchain, twin, seed):
    projs = projects
    assert {p.op_type for p in projs} == {
        "SmoothL1LossGradV2", "ApplyProximalGradientDescent",  # CANN's, with CANN's prototypes
        "AscendLoweringSmoothL1LossGrad", "AscendLoweringApplyProximalGradientDescent"}
    assert sum(len(p.variants) > 1 for p in projs) >= 3
    for project in projs:
        for art in project.variants:
            inputs = _inputs(art, np.random.default_rng([seed, art.key_base]))
            whole = TwinKernel(art, toolchain, project)
            host = whole.host_tiling(inputs)
            plan = art.schedule(N, _shapes(art))
            whole.check_host_tiling(host, whole.plan_tiling(plan, inputs))
            got, _ = whole.run(inputs, host)
            alone = twin.kernel(art)
            want, _ = alone.run(inputs, alone.host_tiling(inputs))
            interpreted = execute(art.kernel, plan_tiles(plan), inputs, N, alloc=art.allocation,
                                  buffer_bytes={b.name: b.bytes for b in plan.buffers}, broadcasts=plan.broadcasts)
            for name, value in got.items():
                assert differing(value, want[name]).size == 0, f"seed {seed}: {art.variant_label}"
                assert differing(value, interpreted[name]).size == 0, f"seed {seed}: {art.variant_label}"


def test_a_call_no_variant_serves_is_refused(projects, toolchain):
    project = next(p for p in projects if p.op_type == "SmoothL1LossGradV2")
    art = project.variants[0]
    whole = TwinKernel(art, toolchain, project)
    inputs = _inputs(art, np.random.default_rng(0))
    shapes = [tuple(inputs[p.name].shape) for p in art.kernel.inputs]
    with pytest.raises(BackendError, match="GRAPH_FAILED"):
        whole.library.host_tiling(shapes, [0] * len(shapes), [1.0, "neither", 1.0], 48, art.target.ub_bytes)
