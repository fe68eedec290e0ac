"""Regenerate the fixtures of fused-op instances inside If/Loop/Scan bodies in tests/fixtures/subgraphs/
(with their manifest.json).

Iterative solvers put the proximal update in a loop body (ISTA, optimizer loops) and conditional
training steps put it, or a SmoothL1 gradient, in a branch. Each fixture is what a real exporter
writes for such a program, or a graph built by hand for what no exporter here writes (nested
bodies, values captured from the outer scope, Scan, a carried value whose shape changes):

    tf     tf2onnx 1.17 (tensorflow-cpu 2.21): tf.while_loop -> Loop, tf.cond -> If
    jax    jax2onnx 0.17.1 (jax 0.10.2): lax.fori_loop -> Loop, lax.cond -> If, lax.scan -> Loop
    torch  torch 2.13 TorchScript exporter (dynamo=False) of a torch.jit.script loop -> Loop
    hand   onnx.parser text, no exporter

The manifest entry of each fixture gives the exporter, the source program, the fused-op instances
the graph holds by its meaning (`fuses`: op type -> count; for the hand-built ones `bodies`, the
subgraph each is in as the report names it) or, for a near miss, why it must not fuse
(`refused_because`, words of the reason), and
how to draw inputs on which the program is well behaved (`inputs`: per graph input a normal
draw's std, a uniform range or a fixed value). An ISTA loop with a step too large for its matrix
diverges to inf, which no diff can hold to a precision bar.

Each exporter runs in its own environment; the project is imported from this checkout only for
the check after export (tests/lowering/test_pass_subgraphs.py's check_fixture: the ONNX checker
and onnxruntime on the unfused graph). CI has no exporter, so the .onnx files and the manifest
are committed. Usage, one exporter at a time (each updates its own entries of the manifest):
    python -m venv /work/venv-tf && /work/venv-tf/bin/pip install tensorflow-cpu==2.21.0 tf2onnx==1.17.0 onnxruntime
    /work/venv-tf/bin/python models/make_loop_models.py tf
    python -m venv /work/venv-jax && /work/venv-jax/bin/pip install "jax[cpu]" jax2onnx onnxruntime
    /work/venv-jax/bin/python models/make_loop_models.py jax
    python -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch==2.13.0 onnx onnxruntime
    /work/venv-torch/bin/python models/make_loop_models.py torch
    python models/make_loop_models.py hand          (the project's own environment)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import onnx
import onnx.parser

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "subgraphs"
MANIFEST = FIXTURES / "manifest.json"
PROX, SL1 = "ApplyProximalGradientDescent", "SmoothL1LossGradV2"

# inputs of the ISTA programs: y = A w with a step below 1/|A|^2, so the iteration contracts
ISTA_INPUTS = {"A": {"std": 0.2}, "y": {"std": 1.0}, "w0": {"std": 1.0},
               "lr": {"uniform": [0.05, 0.2]}, "l1": {"uniform": [0.005, 0.05]}, "l2": {"uniform": [0.01, 0.1]}}
STEP_INPUTS = {"w": {"std": 1.0}, "w0": {"std": 1.0}, "g": {"std": 1.0},
               "lr": {"uniform": [0.05, 0.2]}, "l1": {"uniform": [0.005, 0.05]}, "l2": {"uniform": [0.01, 0.1]}}
ISTA_SOURCE = ("for _ in range(n): p = w - lr * A^T (A w - y); "
               "w = sign(p) * max(|p| - lr * l1, 0) / (1 + lr * l2)")
PROX_SOURCE = "p = w - lr * g; sign(p) * max(|p| - lr * l1, 0) / (1 + lr * l2)"

Entry = dict[str, object]


def _save(name: str, model: onnx.ModelProto, entry: Entry, entries: dict[str, Entry]) -> None:
    """Writes one fixture, checks it as the tests do and records its manifest entry."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for prop in list(model.metadata_props):
        if prop.key.startswith("pkg.") or prop.key == "source":  # exporters' stack traces and paths
            model.metadata_props.remove(prop)
    path = FIXTURES / f"{name}.onnx"
    onnx.save(model, path)
    sys.path.insert(0, str(REPO / "tests" / "lowering"))
    sys.path.insert(0, str(REPO))
    from subgraph_fixtures import check_fixture  # noqa: PLC0415 - tests/lowering, after the path is set

    entry = {"file": path.name, **entry}
    check_fixture(entry)
    entries[path.name] = entry
    print(f"wrote {path.relative_to(REPO)}")


# --------------------------------------------------------------------------------- tf2onnx


def make_tf(entries: dict[str, Entry]) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # noqa: PLC0415 - only this exporter's environment has it
    import tf2onnx  # noqa: PLC0415

    exporter = f"tf2onnx {version('tf2onnx')} (tensorflow {tf.__version__})"

    def prox(w, g, lr, l1, l2):
        p = w - lr * g
        return tf.sign(p) * tf.maximum(tf.abs(p) - lr * l1, 0.0) / (1.0 + lr * l2)

    def ista_fn(batch: int | None):
        spec = [tf.TensorSpec([batch, batch], tf.float32, "A"), tf.TensorSpec([batch, 16], tf.float32, "y"),
                tf.TensorSpec([batch, 16], tf.float32, "w0"), tf.TensorSpec([], tf.float32, "lr"),
                tf.TensorSpec([], tf.float32, "l1"), tf.TensorSpec([], tf.float32, "l2")]

        @tf.function(input_signature=spec)
        def ista(A, y, w0, lr, l1, l2):  # noqa: N803 - the matrix of the problem
            def body(i, w):
                return i + 1, prox(w, tf.matmul(A, tf.matmul(A, w) - y, transpose_a=True), lr, l1, l2)

            _, w = tf.while_loop(lambda i, w: i < 20, body, [tf.constant(0), w0])
            return {"w": w}

        return ista, spec

    for name, batch in (("tf_while_ista", 8), ("tf_while_ista_dynamic", None)):
        fn, spec = ista_fn(batch)
        model, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
        dims = {"A": [8, 8], "y": [8, 16], "w0": [8, 16]} if batch is None else {}
        _save(name, model, {"exporter": exporter, "source": f"tf.while_loop, 20 iterations: {ISTA_SOURCE}"
                            + (" (A, y, w0 of unknown batch size)" if batch is None else ""),
                            "fuses": {PROX: 1}, "bodies": ["while_loop/body"], "inputs": ISTA_INPUTS,
                            "shapes": dims}, entries)

    step_spec = [tf.TensorSpec([], tf.bool, "apply"), tf.TensorSpec([8, 16], tf.float32, "w"),
                 tf.TensorSpec([8, 16], tf.float32, "g"), tf.TensorSpec([], tf.float32, "lr"),
                 tf.TensorSpec([], tf.float32, "l1"), tf.TensorSpec([], tf.float32, "l2")]

    @tf.function(input_signature=step_spec)
    def cond_step(apply, w, g, lr, l1, l2):
        return {"w_new": tf.cond(apply, lambda: prox(w, g, lr, l1, l2), lambda: w - lr * g)}

    model, _ = tf2onnx.convert.from_function(cond_step, input_signature=step_spec, opset=17)
    _save("tf_cond_prox", model, {"exporter": exporter, "source": f"tf.cond(apply, {PROX_SOURCE}, w - lr * g)",
                                  "fuses": {PROX: 1}, "inputs": {**STEP_INPUTS, "apply": {"value": True}}}, entries)

    sl1_spec = [tf.TensorSpec([], tf.bool, "use_sl1"), tf.TensorSpec([4, 5], tf.float32, "p"),
                tf.TensorSpec([4, 5], tf.float32, "t"), tf.TensorSpec([], tf.float32, "dout")]

    @tf.function(input_signature=sl1_spec)
    def cond_sl1(use_sl1, p, t, dout):
        def sl1_grad():
            x = p - t
            return tf.where(tf.abs(x) < 0.5, x / 0.5, tf.sign(x)) * dout

        return {"grad": tf.cond(use_sl1, sl1_grad, lambda: (p - t) * dout)}

    model, _ = tf2onnx.convert.from_function(cond_sl1, input_signature=sl1_spec, opset=17)
    _save("tf_cond_smooth_l1", model,
          {"exporter": exporter, "source": "tf.cond(use_sl1, where(|p - t| < 0.5, (p - t) / 0.5, sign(p - t)) * dout, "
                                           "(p - t) * dout)",
           "fuses": {SL1: 1},
           "inputs": {"use_sl1": {"value": True}, "p": {"std": 1.0}, "t": {"std": 1.0},
                      "dout": {"uniform": [0.5, 2.0]}}}, entries)


# --------------------------------------------------------------------------------- jax2onnx


def make_jax(entries: dict[str, Entry]) -> None:
    import jax  # noqa: PLC0415 - only this exporter's environment has it
    import jax.numpy as jnp  # noqa: PLC0415
    from jax2onnx import to_onnx  # noqa: PLC0415

    exporter = f"jax2onnx {version('jax2onnx')} (jax {jax.__version__})"

    def prox(w, g, lr, l1, l2):
        p = w - lr * g
        return jnp.sign(p) * jnp.maximum(jnp.abs(p) - lr * l1, 0.0) / (1.0 + lr * l2)

    # jax2onnx 0.17.1 cannot close a fori_loop body over traced values (TracerArrayConversionError),
    # so the problem's data rides in the loop state, as users of it write it
    def ista(A, y, w0, lr, l1, l2):  # noqa: N803 - the matrix of the problem
        def body(i, state):
            w, A, y, lr, l1, l2 = state  # noqa: N806
            return prox(w, A.T @ (A @ w - y), lr, l1, l2), A, y, lr, l1, l2

        return jax.lax.fori_loop(0, 20, body, (w0, A, y, lr, l1, l2))[0]

    model = to_onnx(ista, [(8, 8), (8, 16), (8, 16), (), (), ()], input_names=list(ISTA_INPUTS))
    _save("jax_fori_ista", model, {"exporter": exporter, "source": f"lax.fori_loop(0, 20, ...): {ISTA_SOURCE}",
                                   "fuses": {PROX: 1}, "inputs": ISTA_INPUTS}, entries)

    def step(apply, w, g, lr, l1, l2):
        return jax.lax.cond(apply, lambda w: prox(w, g, lr, l1, l2), lambda w: w - lr * g, w)

    model = to_onnx(step, [jax.ShapeDtypeStruct((), jnp.bool_), (8, 16), (8, 16), (), (), ()],
                    input_names=["apply", "w", "g", "lr", "l1", "l2"])
    _save("jax_cond_prox", model, {"exporter": exporter, "source": f"lax.cond(apply, {PROX_SOURCE}, w - lr * g)",
                                   "fuses": {PROX: 1},
                                   "inputs": {**STEP_INPUTS, "apply": {"value": True}}}, entries)

    def sgd_steps(w0, gs, lr, l1, l2):
        def body(w, g):
            w = prox(w, g, lr, l1, l2)
            return w, w

        return jax.lax.scan(body, w0, gs)

    model = to_onnx(sgd_steps, [(8, 16), (6, 8, 16), (), (), ()], input_names=["w0", "gs", "lr", "l1", "l2"])
    _save("jax_scan_prox", model,
          {"exporter": exporter, "source": f"lax.scan over 6 gradients g: w = {PROX_SOURCE}, every w kept",
           "fuses": {PROX: 1},
           "inputs": {"w0": {"std": 1.0}, "gs": {"std": 1.0}, "lr": {"uniform": [0.05, 0.2]},
                      "l1": {"uniform": [0.005, 0.05]}, "l2": {"uniform": [0.01, 0.1]}}}, entries)


# ------------------------------------------------------------------------------ TorchScript


def make_torch(entries: dict[str, Entry]) -> None:
    import torch  # noqa: PLC0415 - only this exporter's environment has it

    exporter = f"torch {torch.__version__.split('+')[0]} TorchScript exporter (torch.jit.script, dynamo=False)"

    class Ista(torch.nn.Module):
        def forward(self, A, y, w, lr, l1, l2, n: int):  # noqa: N803 - the matrix of the problem
            for _ in range(n):
                p = w - lr * (A.t() @ (A @ w - y))
                w = torch.sign(p) * torch.clamp(torch.abs(p) - lr * l1, min=0.0) / (1.0 + lr * l2)
            return w

    class CondStep(torch.nn.Module):
        def forward(self, apply: bool, p, t, dout):
            if apply:
                x = p - t
                g = torch.where(torch.abs(x) < 0.5, x / 0.5, torch.sign(x)) * dout
            else:
                g = (p - t) * dout
            return g

    class CondStepOuterSub(torch.nn.Module):
        def forward(self, apply: bool, p, t, dout):
            x = p - t
            if apply:
                g = torch.where(torch.abs(x) < 0.5, x / 0.5, torch.sign(x)) * dout
            else:
                g = x * dout
            return g

    path = FIXTURES / "torch_script_loop_ista.onnx"
    args = (torch.zeros(8, 8), torch.zeros(8, 16), torch.zeros(8, 16), torch.tensor(0.1), torch.tensor(0.01),
            torch.tensor(0.05), 20)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(torch.jit.script(Ista()), args, path, dynamo=False, opset_version=17,
                      input_names=["A", "y", "w0", "lr", "l1", "l2", "n"], output_names=["w"])
    _save("torch_script_loop_ista", onnx.load(path),
          {"exporter": exporter, "source": f"a scripted for loop: {ISTA_SOURCE}", "fuses": {PROX: 1},
           "inputs": {**ISTA_INPUTS, "n": {"value": 20}}}, entries)
    sl1_inputs = {"apply": {"value": True}, "p": {"std": 1.0}, "t": {"std": 1.0}, "dout": {"uniform": [0.5, 2.0]}}
    args = (True, torch.zeros(4, 5), torch.zeros(4, 5), torch.tensor(1.0))
    path = FIXTURES / "torch_script_if_smooth_l1.onnx"
    torch.onnx.export(torch.jit.script(CondStep()), args, path, dynamo=False, opset_version=17,
                      input_names=["apply", "p", "t", "dout"], output_names=["grad"])
    _save("torch_script_if_smooth_l1", onnx.load(path),
          {"exporter": exporter, "source": "a scripted if: x = p - t; where(|x| < 0.5, x / 0.5, sign(x)) * dout, "
                                           "else (p - t) * dout", "fuses": {SL1: 1}, "inputs": sl1_inputs}, entries)
    # x = p - t before the if: the branch reads x from the outer scope, and a match never crosses
    # a body's boundary, so the branch holds a select of an outer value, not a gradient of p and t
    path = FIXTURES / "torch_script_if_smooth_l1_outer_sub.onnx"
    torch.onnx.export(torch.jit.script(CondStepOuterSub()), args, path, dynamo=False, opset_version=17,
                      input_names=["apply", "p", "t", "dout"], output_names=["grad"])
    _save("torch_script_if_smooth_l1_outer_sub", onnx.load(path),
          {"exporter": exporter, "source": "x = p - t; a scripted if: where(|x| < 0.5, x / 0.5, sign(x)) * dout, "
                                           "else x * dout", "fuses": {},
           "refused_because": "is not predict - label", "inputs": sl1_inputs}, entries)


# ------------------------------------------------------------------------------- by hand

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'
PROX_TEXT = """
      {p} = Sub({w}, {st})
      {t} = Mul({lr}, {l1})
      {a} = Abs({p})
      {d} = Sub({a}, {t})
      {z} = Max({d}, {zero})
      {s} = Sign({p})
      {n} = Mul({s}, {z})
      {q} = Mul({lr}, {l2})
      {den} = Add({one}, {q})
      {out} = Div({n}, {den})"""


def _prox(out: str, w: str, st: str, lr: str = "lr", l1: str = "l1", l2: str = "l2", zero: str = "zero",
          one: str = "one", tag: str = "_") -> str:
    names = {k: f"{k}{tag}" for k in ("p", "t", "a", "d", "z", "s", "n", "q", "den")}
    return PROX_TEXT.format(out=out, w=w, st=st, lr=lr, l1=l1, l2=l2, zero=zero, one=one, **names)


SL1_TEXT = """
      x{tag} = Sub({p}, {t})
      ax{tag} = Abs(x{tag})
      near{tag} = Less(ax{tag}, beta)
      gx{tag} = Mul({go}, x{tag})
      lin{tag} = Div(gx{tag}, beta)
      sx{tag} = Sign(x{tag})
      sat{tag} = Mul({go}, sx{tag})
      {out} = Where(near{tag}, lin{tag}, sat{tag})"""

HAND: dict[str, tuple[str, Entry]] = {
    # 100 iterations over [8,16]; the step's scalars are outer graph inputs the body reads by name,
    # the bound M an outer constant
    "hand_loop_ista_100": (f"""{HEADER}
main (float[8,8] A, float[8,16] y, float[8,16] w0, float lr, float l1, float l2) => (float[8,16] w) {{
  m = Constant<value = int64 {{100}}>()
  c = Constant<value = bool {{1}}>()
  zero = Constant<value = float {{0}}>()
  one = Constant<value = float {{1}}>()
  at = Transpose<perm = [1, 0]>(A)
  w = Loop(m, c, w0) <body = ista (int64 i, bool cin, float[8,16] win) => (bool cout, float[8,16] wout) {{
      cout = Identity(cin)
      aw = MatMul(A, win)
      r = Sub(aw, y)
      gr = MatMul(at, r)
      st = Mul(lr, gr){_prox("wout", "win", "st")}
  }}>
}}""", {"source": f"100 iterations: {ISTA_SOURCE}; zero, one and A^T are outer values the body reads by name",
        "fuses": {PROX: 1}, "bodies": ["Loop(w)/body"], "inputs": ISTA_INPUTS}),
    # the carried value's shape is not declared: it is worked out from w0 (loop-invariant)
    "hand_loop_untyped_carried": (f"""{HEADER}
main (float[8,16] w0, float[8,16] g, float lr, float l1, float l2, int64 n) => (float[8,16] w) {{
  c = Constant<value = bool {{1}}>()
  w = Loop(n, c, w0) <body = steps (int64 i, bool cin, float[M,K] win) => (bool cout, float[M,K] wout) {{
      cout = Identity(cin)
      zero = Constant<value = float {{0}}>()
      one = Constant<value = float {{1}}>()
      st = Mul(lr, g){_prox("wout", "win", "st")}
  }}>
}}""", {"source": f"n iterations of w = {PROX_SOURCE}; the body declares w's shape [M,K] only",
        "fuses": {PROX: 1}, "bodies": ["Loop(w)/body"], "untyped": ["win"],
        "inputs": {**STEP_INPUTS, "n": {"value": 7}}}),
    # a Loop whose body holds an If: the update in the then-branch, plain SGD in the else-branch
    "hand_if_in_loop": (f"""{HEADER}
main (float[8,16] w0, float[8,16] g, float lr, float l1, float l2) => (float[8,16] w) {{
  m = Constant<value = int64 {{6}}>()
  c = Constant<value = bool {{1}}>()
  two = Constant<value = int64 {{2}}>()
  zi = Constant<value = int64 {{0}}>()
  w = Loop(m, c, w0) <body = steps (int64 i, bool cin, float[8,16] win) => (bool cout, float[8,16] wout) {{
      cout = Identity(cin)
      k = Mod(i, two)
      even = Equal(k, zi)
      st = Mul(lr, g)
      wout = If(even) <then_branch = prox () => (float[8,16] upd) {{
          zero = Constant<value = float {{0}}>()
          one = Constant<value = float {{1}}>(){_prox("upd", "win", "st")}
      }}, else_branch = sgd () => (float[8,16] sgd_out) {{
          sgd_out = Sub(win, st)
      }}>
  }}>
}}""", {"source": f"6 iterations; in even ones w = {PROX_SOURCE}, in odd ones w = w - lr * g",
        "fuses": {PROX: 1}, "bodies": ["Loop(w)/body/If(wout)/then_branch"], "inputs": STEP_INPUTS}),
    # a Loop in a Loop: the SmoothL1 gradient in the inner body reads the outer body's value
    "hand_nested_loops_smooth_l1": (f"""{HEADER}
main (float[4,5] p0, float[4,5] t, float go) => (float[4,5] p) {{
  m = Constant<value = int64 {{3}}>()
  c = Constant<value = bool {{1}}>()
  beta = Constant<value = float {{0.5}}>()
  step = Constant<value = float {{0.1}}>()
  p = Loop(m, c, p0) <body = outer (int64 i, bool cin, float[4,5] pin) => (bool cout, float[4,5] pout) {{
      cout = Identity(cin)
      tshift = Mul(t, step)
      pout = Loop(m, c, pin) <body = inner (int64 j, bool c2, float[4,5] q) => (bool c2out, float[4,5] qout) {{
          c2out = Identity(c2){SL1_TEXT.format(out="gr", p="q", t="tshift", go="go", tag="")}
          dq = Mul(step, gr)
          qout = Sub(q, dq)
      }}>
  }}>
}}""", {"source": "3 x 3 nested iterations of p = p - 0.1 * smooth_l1_grad(p, 0.1 * t, go, beta=0.5); the inner "
                  "body reads the outer body's 0.1 * t and the main graph's beta",
        "fuses": {SL1: 1}, "bodies": ["Loop(p)/body/Loop(pout)/body"],
        "inputs": {"p0": {"std": 1.0}, "t": {"std": 1.0}, "go": {"uniform": [0.5, 2.0]}}}),
    # Scan over per-step gradients; the slice's shape is worked out from the scanned input
    "hand_scan_prox": (f"""{HEADER}
main (float[8,16] w0, float[5,8,16] gs, float lr, float l1, float l2) => (float[8,16] w, float[5,8,16] ws) {{
  zero = Constant<value = float {{0}}>()
  one = Constant<value = float {{1}}>()
  w, ws = Scan<num_scan_inputs = 1, body = step (float[8,16] win, float g) => (float[8,16] wout,
                                                                               float[8,16] keep) {{
      st = Mul(lr, g){_prox("wout", "win", "st")}
      keep = Identity(wout)
  }}>(w0, gs)
}}""", {"source": f"Scan over 5 gradients g: w = {PROX_SOURCE}, every w kept; the body declares g's type only",
        "fuses": {PROX: 1}, "bodies": ["Scan(w)/body"], "untyped": ["g"],
        "inputs": {"w0": {"std": 1.0}, "gs": {"std": 1.0}, "lr": {"uniform": [0.05, 0.2]},
                   "l1": {"uniform": [0.005, 0.05]}, "l2": {"uniform": [0.01, 0.1]}}}),
    # the carried value grows by a row each iteration and the body does not declare its shape: it
    # is not loop-invariant, so var's shape is unknown where delta's is [1,16]
    "hand_loop_growing_carried": (f"""{HEADER}
main (float[1,16] w0, float[1,16] g, float lr, float l1, float l2) => (float[N,16] w) {{
  m = Constant<value = int64 {{3}}>()
  c = Constant<value = bool {{1}}>()
  zero = Constant<value = float {{0}}>()
  one = Constant<value = float {{1}}>()
  w = Loop(m, c, w0) <body = grow (int64 i, bool cin, float[M,16] win) => (bool cout, float[K,16] wout) {{
      cout = Identity(cin)
      st = Mul(lr, g){_prox("upd", "win", "st")}
      wout = Concat<axis = 0>(upd, win)
  }}>
}}""", {"source": "3 iterations of w = concat(prox(w, g), w): w grows by its own rows each time",
        "fuses": {}, "refused_because": "not loop-invariant", "untyped": ["win"], "inputs": STEP_INPUTS}),
}


def _untype(model: onnx.ModelProto, names: list[str]) -> None:
    """Leaves the shape of these body inputs out, as exporters often do."""
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for vi in graph.input:
            if vi.name in names:
                vi.type.tensor_type.ClearField("shape")
        stack.extend(a.g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)


def make_hand(entries: dict[str, Entry]) -> None:
    for name, (text, entry) in HAND.items():
        model = onnx.parser.parse_model(text)
        untyped = entry.get("untyped")
        if isinstance(untyped, list):
            _untype(model, untyped)
        _save(name, model, {"exporter": "hand-built (onnx.parser)", **entry}, entries)


MAKERS: dict[str, Callable[[dict[str, Entry]], None]] = {"tf": make_tf, "jax": make_jax, "torch": make_torch,
                                                         "hand": make_hand}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exporter", choices=sorted(MAKERS))
    args = parser.parse_args()
    entries: dict[str, Entry] = {}
    if MANIFEST.exists():
        entries = {e["file"]: e for e in json.loads(MANIFEST.read_text())}
    MAKERS[args.exporter](entries)
    data = [{k: v for k, v in e.items() if v is not None} for _, e in sorted(entries.items())]
    MANIFEST.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {MANIFEST.relative_to(REPO)} ({len(data)} fixtures)")


if __name__ == "__main__":
    main()
