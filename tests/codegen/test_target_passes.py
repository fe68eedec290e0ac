"""Target rewrites change no bit: a kernel as emitted for ascend910b (Sign as Compare/Select/Add)
gives exactly the outputs of the target-independent kernel, on edge-laden data."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.ir import Kind, Op
from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD
from runtime.backends.cpu import plan_tiles
from runtime.interpreter import execute
from runtime.numerics import NUMPY_DTYPES

SEED = 19
N = 4099
EDGES = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 0.5, -0.5, 3e38, -3e38], np.float64)


def _specs() -> list[NodeSpec]:
    out = []
    for dtype in ("float32", "float16", "bfloat16"):
        for sigma in (0.0, 0.5):
            inputs = {r: InputSpec(dtype, (N,)) for r in ("predict", "label")}
            inputs["dout"] = InputSpec(dtype, ())
            out.append(NodeSpec("n", SMOOTH_L1_GRAD, inputs, {"sigma": sigma, "reduction": "mean", "scale": 1.0}))
        inputs = {"var": InputSpec(dtype, (N,)), "delta": InputSpec(dtype, (N,))}
        inputs.update({r: InputSpec(dtype, ()) for r in ("alpha", "l1", "l2")})
        out.append(NodeSpec("n", PROXIMAL_GD, inputs, {"scalar_form": "raw"}))
    return out


def _run(art, inputs):
    plan = art.schedule(N)
    return execute(art.kernel, plan_tiles(plan), inputs, N, alloc=art.allocation,
                   buffer_bytes={b.name: b.bytes for b in plan.buffers})


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: f"{s.op_type}-{s.inputs[next(iter(s.inputs))].dtype}")
def test_sign_expansion_is_bit_exact(spec: NodeSpec) -> None:
    plain = kernel_for_spec(spec)
    assert any(ins.op is Op.SIGN for ins in plain.instrs)
    rng = np.random.default_rng(SEED)
    inputs = {}
    for p in plain.inputs:
        if p.kind is Kind.TILE:
            x = rng.normal(0, 1, N)
            x[rng.choice(N, N // 4, replace=False)] = rng.choice(EDGES, N // 4)
        else:
            x = np.array([rng.uniform(-1, 1)])
        with np.errstate(over="ignore"):
            inputs[p.name] = x.astype(NUMPY_DTYPES[p.dtype]).reshape(-1 if p.kind is Kind.TILE else ())
    want = _run(artifact_for_target(plain, "ascend950"), inputs)
    art = artifact_for_target(plain, "ascend910b")
    assert not any(ins.op is Op.SIGN for ins in art.kernel.instrs)
    got = _run(art, inputs)
    for name, w in want.items():
        bits = (np.uint32 if w.itemsize == 4 else np.uint16)
        differ = np.flatnonzero(got[name].view(bits) != w.view(bits))
        assert differ.size == 0, f"seed {SEED}: {differ.size} elements differ, first at {differ[:5]}"
