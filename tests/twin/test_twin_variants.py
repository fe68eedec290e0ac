"""Every emitted variant on every target, compiled from its emitted C++ and run on the twin.

Each case fuses an unfused graph, runs the fused model with the twin backend and with the CPU
backend (the IR interpreter) and requires bit-identical outputs, then holds the twin's output to
the precision standard against onnxruntime on the unfused graph (one step apart at most where the
golden is subnormal, see twin_cases.within_standard). Inputs mix random values with
exact thresholds, signed zeros, tiny and huge values, infinities and NaN.

Bit-identical means every non-NaN element has the same bits (so +0/-0 and +-inf must agree) and
NaN sits at the same places. Which NaN an operation on two NaNs returns is left open by IEEE 754
and undocumented for the AI Core; numpy itself returns the first operand's NaN in array-array
loops but the second's in its array-scalar add/multiply loops, so NaN payloads are no contract.
"""

from __future__ import annotations

import numpy as np
import pytest
from twin_cases import cases, differing, feeds_of, model_of, size_of, within_standard

from lowering import fuse
from runtime.graph_exec import run_fused_model
from runtime.ort_exec import run_model

CASES = cases()


@pytest.mark.parametrize(("variant", "target", "size_class"), CASES,
                         ids=[f"{v.name}-{t}-{s}" for v, t, s in CASES])
def test_twin_matches_cpu_backend_and_onnxruntime(variant, target, size_class, twin, cpu, seed):
    rng = np.random.default_rng([seed, CASES.index((variant, target, size_class))])
    shape = size_of(size_class, target, rng)
    unfused = model_of(variant, shape)
    fused, report = fuse(unfused)
    assert len(report.fusions) == 1, report
    feeds = feeds_of(variant, shape, rng)
    where = f"seed {seed}, shape {shape}"

    got, runs = run_fused_model(fused, feeds, twin, target)
    assert [r.error for r in runs] == [""], where
    want, _ = run_fused_model(fused, feeds, cpu, target)
    golden = run_model(unfused, feeds)
    for name, value in got.items():
        assert value.dtype == want[name].dtype and value.shape == want[name].shape
        mismatch = differing(value, want[name])
        assert mismatch.size == 0, \
            f"{where}: {mismatch.size} elements differ from the CPU backend, first at {mismatch[:5]}"
        ok, detail = within_standard(name, value, golden[name])
        assert ok, f"{where}: {detail}"


def test_within_standard_allows_one_subnormal_step_and_nothing_more():
    golden = np.array([3.576e-06, 0.0, 1.0, -2.5], np.float16)
    step = np.float16(2.0**-24)
    assert within_standard("g", golden, golden)[0]
    one_step = golden.copy()
    one_step[:2] += step
    assert within_standard("g", one_step, golden)[0]
    two_steps = golden.copy()
    two_steps[0] += 2 * step
    assert not within_standard("g", two_steps, golden)[0]
    normal_off = golden.copy()
    normal_off[2] = np.float16(1.02)
    assert not within_standard("g", normal_off, golden)[0]
    nan_moved = golden.copy()
    nan_moved[3] = np.nan
    assert not within_standard("g", nan_moved, golden)[0]
