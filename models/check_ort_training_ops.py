"""Check lower's own com.microsoft training ops (runtime/contrib_ops.py) against onnxruntime-training.

`lower diff` and `--verify` run the training-only ops of onnxruntime-training's graphs (Scale,
InPlaceAccumulatorV2) themselves, since the onnxruntime package they use has no kernels for them.
This script holds that implementation to the real CPU kernels, bit for bit:

- every such node of the fixtures in tests/fixtures/ort_training, on the inputs onnxruntime-training
  computes for it from generated graph inputs (seeds 0..SEEDS-1, both values of the accumulators'
  overwrite flag among them): its outputs, and the buffer an accumulator writes in place;
- one-node models for what the fixtures do not hold: Scale with scale_down 0 and 1, float and double
  inputs, float, double, int64 and int32 scales of awkward values; InPlaceAccumulatorV2 without the
  flag, with a broadcast value, and with its optional second output.

Needs onnxruntime-training-cpu 1.19.2 (the package the fixtures were made with) with numpy<2 and
onnx 1.17.0, plus ml_dtypes; the project is imported from this checkout, not installed (installing
it would pull in the plain onnxruntime package over the training one). Usage:
python -m venv /tmp/venv-ortt && /tmp/venv-ortt/bin/pip install onnxruntime-training-cpu==1.19.2 "numpy<2"
onnx==1.17.0 "ml_dtypes<0.7"; /tmp/venv-ortt/bin/python models/check_ort_training_ops.py
Prints one line per case and a closing 'N passed, N failed'; exits 1 when any value differs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runtime.contrib_ops import MS_DOMAIN, implements, run_contrib  # noqa: E402
from runtime.inputs import generate_inputs, model_input_specs  # noqa: E402

SEEDS = 8
FIXTURES = REPO / "tests" / "fixtures" / "ort_training"


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every graph output, and every input after the run (accumulators write theirs in place)."""
    values = {k: ort.OrtValue.ortvalue_from_numpy(np.array(v, copy=True)) for k, v in feeds.items()}
    sess = _session(model)
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run_with_ort_values(names, values)
    return {n: v.numpy() for n, v in zip(names, outs)}, {k: v.numpy() for k, v in values.items()}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _check_node(node: onnx.NodeProto, inputs: list[np.ndarray | None], outputs: dict[str, np.ndarray],
                after: dict[str, np.ndarray]) -> list[str]:
    """What differs between lower's run of `node` and onnxruntime-training's (empty: nothing)."""
    result = run_contrib(node, inputs)
    bad = [f"output {name}" for name, got in zip(node.output, result.outputs)
           if name and got is not None and not _same(got, outputs[name])]
    bad += [f"in-place {node.input[k]}" for k, got in result.updates.items() if not _same(got, after[node.input[k]])]
    return bad


def _exposed(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose graph outputs also hold every input and output of the ops lower implements."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    graph_inputs = {i.name for i in m.graph.input}
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        if implements(node):
            for name in [*node.input, *node.output]:
                if name and name not in have and name not in graph_inputs:
                    m.graph.output.append(onnx.ValueInfoProto(name=name))
                    have.add(name)
    return m


def fixture_cases() -> Iterator[tuple[str, list[str]]]:
    for path in sorted(FIXTURES.glob("*.onnx")):
        model = onnx.load(str(path))
        probe = _exposed(model)
        specs = model_input_specs(model)
        for seed in range(SEEDS):
            feeds = generate_inputs(specs, {s.name: tuple(s.shape) for s in specs}, seed)
            outputs, after = _run(probe, feeds)
            known = {**feeds, **outputs}
            for node in model.graph.node:
                if implements(node):
                    inputs = [np.asarray(known[n]) if n else None for n in node.input]
                    flag = f", flag {bool(feeds['lazy_reset_grad'][0])}" if "lazy_reset_grad" in feeds else ""
                    yield (f"{path.stem} seed {seed}{flag}: {node.op_type} {node.name}",
                           _check_node(node, inputs, outputs, after))


def _one_node(node: onnx.NodeProto, inputs: dict[str, np.ndarray], outputs: dict[str, int]) -> list[str]:
    def info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
        return h.make_tensor_value_info(name, h.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))

    graph = h.make_graph([node], "one", [info(k, v) for k, v in inputs.items()],
                         [h.make_tensor_value_info(k, t, None) for k, t in outputs.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS_DOMAIN, 1)])
    got, after = _run(model, inputs)
    return _check_node(node, [inputs[n] if n else None for n in node.input], got, after)


def single_cases() -> Iterator[tuple[str, list[str]]]:
    rng = np.random.default_rng(0)
    scales = {"float": np.float32(3.3), "double": np.float64(0.1), "int64": np.int64(7), "int32": np.int32(-3)}
    for xt in (np.float32, np.float64):
        x = (rng.standard_normal((3, 7)) * 10).astype(xt)
        for sname, s in scales.items():
            for down in (0, 1):
                node = h.make_node("Scale", ["x", "s"], ["y"], domain=MS_DOMAIN, scale_down=down)
                yield (f"Scale {np.dtype(xt).name} x, {sname} scale {s}, scale_down {down}",
                       _one_node(node, {"x": x, "s": np.array(s)}, {"y": h.np_dtype_to_tensor_dtype(np.dtype(xt))}))
    buffer = rng.standard_normal((4, 5)).astype(np.float32)
    value = rng.standard_normal((4, 5)).astype(np.float32)
    row = rng.standard_normal((5,)).astype(np.float32)
    node = h.make_node("InPlaceAccumulatorV2", ["b", "v"], ["flag"], domain=MS_DOMAIN)
    yield "InPlaceAccumulatorV2 without the flag", _one_node(node, {"b": buffer, "v": value}, {"flag": T.BOOL})
    yield "InPlaceAccumulatorV2, broadcast value", _one_node(node, {"b": buffer, "v": row}, {"flag": T.BOOL})
    node = h.make_node("InPlaceAccumulatorV2", ["b", "v", "o"], ["flag", "out"], domain=MS_DOMAIN)
    for flag in (False, True):
        yield (f"InPlaceAccumulatorV2 with output 1, flag {flag}",
               _one_node(node, {"b": buffer, "v": value, "o": np.array([flag])}, {"flag": T.BOOL, "out": T.FLOAT}))


def main() -> int:
    print(f"onnxruntime {ort.__version__} ({ort.__file__})")
    passed = failed = 0
    for name, bad in [*fixture_cases(), *single_cases()]:
        print(f"{'PASS' if not bad else 'FAIL'} {name}" + (f": differs at {', '.join(bad)}" if bad else ""))
        passed += not bad
        failed += bool(bad)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
