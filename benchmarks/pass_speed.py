"""How fast the graph pass is on big graphs, against the onnxscript rewriter on the same graphs.

Builds synthetic float32 ONNX graphs (opset 18, static [64] shapes) of about 40k and 200k nodes:
random elementwise ops wired to earlier values, with thousands of planted instances of
  * PyTorch's SmoothL1-backward decomposition
      x = Sub(p, l); g = Mul(go, norm)
      Where(Less(Abs(x), beta), Div(Mul(g, x), beta), Mul(g, Sign(x)))
  * the proximal update
      prox = Sub(var, Mul(alpha, delta))
      Div(Mul(Sign(prox), Max(Sub(Abs(prox), t), zero)), k)
and some near misses that must not fuse (an escaping intermediate, an intermediate that is a graph
output, a constant the user can override, plain L2-only SGD).

Then times, end to end from file to file, best of --rounds runs, each run in a fresh Python process
(rounds alternate their order, so the runs a ratio compares are close in time):
  ours       lowering.loading.load -> lowering.api.fuse_loaded -> lowering.loading.save, the
             `lower` command's own path (with the ONNX checker, which onnx_ir.load skips; on a
             model of 2 MB or more and a second core it runs in a child process beside the pass)
  onnxscript onnx_ir.load -> onnxscript.rewriter.rewrite(rules below) -> onnx_ir.save
The onnxscript rules match exactly the planted forms (fixed operand order, no commute()), check
the constants as our pass does, and emit the same custom ops. By default they write no function
bodies, so onnxscript does less work than our pass (one model-local function per fused node);
--onnxscript-functions sets as_function=True, whose extraction rescans the whole graph for every
fusion (quadratic in onnxscript 0.7), which is practical only with --quick.

Ours is timed twice per graph: with an empty proof store ("cold": the first run of a fresh
install, which reads only the proofs the package ships and proves every other family of forms;
lowering/proof/store.py) and with the store that run left ("ours s", every later run). Prints a
table and exits 1 with a MISMATCH line when the two disagree on what fused.
The large graph is timed twice: as built, and with its value_info removed (every type a match
needs is then worked out by the pass; onnxscript's rules check shapes, so its run first applies
onnx_ir's ShapeInferencePass). Each run also reports its process's peak resident memory.
Goals: ours >= 5x faster than onnxscript at 200k nodes, with and without value_info, with peak
memory no higher than onnxscript's; our 200k/40k time ratio <= 5.5.

Usage: python benchmarks/pass_speed.py [--quick] [--seed 0] [--rounds 2]
                                       [--pattern-share 0.4] [--onnxscript-functions] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.errors import LoweringError  # noqa: E402
from contracts.fused_ops import DOMAIN, PROXIMAL_GD, SMOOTH_L1_GRAD  # noqa: E402
from lowering.api import fuse_loaded  # noqa: E402
from lowering.loading import load, save  # noqa: E402
from lowering.report import FusionReport  # noqa: E402

OPSET = 18
IR_VERSION = 10
WIDTH = 64  # every tensor is float32[WIDTH]; scalars are 0-D
SL1_NODES = 9
PROX_NODES = 8
SUM_FANIN = 64  # leftover values are summed into graph outputs in groups of this size

UNARY = ("Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Exp")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


@dataclass(frozen=True)
class Instance:
    kind: str  # "smooth_l1", "proximal", or the near miss's kind
    op_type: str  # the fused op it should become (also for near misses, which must not)
    output: str  # the planted output value
    core: str  # name of a node every fusion of this instance must contain (its Sign, or Sub for SGD)


@dataclass
class Planted:
    positives: list[Instance] = field(default_factory=list)
    near_misses: list[Instance] = field(default_factory=list)

    def count(self, op_type: str) -> int:
        return sum(i.op_type == op_type for i in self.positives)


class _Builder:
    """Appends NodeProtos and value_info straight into one GraphProto (no helper overhead)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.model = onnx.ModelProto(ir_version=IR_VERSION, producer_name="pass_speed")
        self.model.opset_import.add(domain="", version=OPSET)
        self.graph = self.model.graph
        self.graph.name = "pass_speed"
        self.counter = 0
        self.values: list[str] = []  # tensors later nodes may read
        self.unused: list[str] = []  # tensors nothing reads yet
        self.unused_set: set[str] = set()
        self.planted = Planted()
        self._tensor = self._value_info(TensorProto.FLOAT, (WIDTH,))
        self._mask = self._value_info(TensorProto.BOOL, (WIDTH,))
        self._scalar = self._value_info(TensorProto.FLOAT, ())

    @staticmethod
    def _value_info(elem_type: int, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
        vi = onnx.ValueInfoProto()
        tt = vi.type.tensor_type
        tt.elem_type = elem_type
        tt.shape.SetInParent()
        for d in shape:
            tt.shape.dim.add().dim_value = d
        return vi

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def node(self, op: str, inputs: list[str], kind: str = "tensor") -> str:
        """Appends one node; its output is named v<k> and the node n<k>."""
        out = self.fresh("v")
        self.graph.node.add(op_type=op, input=inputs, output=[out], name="n" + out[1:])
        template = {"tensor": self._tensor, "mask": self._mask, "scalar": self._scalar}[kind]
        vi = self.graph.value_info.add()
        vi.CopyFrom(template)
        vi.name = out
        self.unused_set.difference_update(inputs)
        return out

    def scalar(self, prefix: str, value: float) -> str:
        name = self.fresh(prefix)
        self.graph.initializer.add(name=name, data_type=TensorProto.FLOAT, float_data=[value])
        return name

    def graph_input(self, name: str, scalar: bool = False) -> str:
        vi = self.graph.input.add()
        vi.CopyFrom(self._scalar if scalar else self._tensor)
        vi.name = name
        return name

    def graph_output(self, name: str) -> None:
        vi = self.graph.output.add()
        vi.CopyFrom(self._tensor)
        vi.name = name

    def publish(self, name: str) -> None:
        """Makes a tensor available to later nodes."""
        self.values.append(name)
        self.unused.append(name)
        self.unused_set.add(name)

    def pick(self, avoid: tuple[str, ...] = ()) -> str:
        """An earlier tensor: often one nothing reads yet (so little is dead), else a recent or any one."""
        rng = self.rng
        while True:
            r = rng.random()
            if r < 0.5 and self.unused:
                i = rng.randrange(len(self.unused))
                self.unused[i], self.unused[-1] = self.unused[-1], self.unused[i]
                name = self.unused.pop()
                if name not in self.unused_set:
                    continue  # read meanwhile; the list is cleaned lazily
            elif r < 0.9:
                name = self.values[-1 - rng.randrange(min(256, len(self.values)))]
            else:
                name = self.values[rng.randrange(len(self.values))]
            if name not in avoid:
                return name

    def filler(self) -> int:
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            self.publish(self.node(rng.choice(UNARY), [self.pick()]))
            return 1
        if r < 0.85:
            a = self.pick()
            self.publish(self.node(rng.choice(BINARY), [a, self.pick((a,))]))
            return 1
        if r < 0.95:
            c = self.scalar("c", rng.uniform(-2.0, 2.0))
            self.publish(self.node(rng.choice(("Add", "Mul", "Div")), [self.pick(), c]))
            return 1
        a = self.pick()
        b = self.pick((a,))
        mask = self.node(rng.choice(("Less", "Greater")), [a, b], "mask")
        self.publish(self.node("Where", [mask, a, b]))
        return 2

    def smooth_l1(self, serial: int, go: str, escape: str | None = None) -> Instance:
        """PyTorch's SmoothL1 backward; `serial` keeps its constants apart from every other instance's
        (so CSE merges none), `escape` names the one way a near miss is spoilt."""
        rng = self.rng
        p = self.pick()
        lab = self.pick((p,))
        full_dout = rng.random() < 0.25
        dout = self.pick((p, lab)) if full_dout else go
        beta = self.scalar("beta", 0.5 + 1e-6 * serial)
        if escape == "beta_overridable":
            self.graph_input(beta, scalar=True)
        norm = self.scalar("norm", 1.0 / WIDTH if rng.random() < 0.5 else 0.25 + 1e-6 * serial)
        x = self.node("Sub", [p, lab])
        g = self.node("Mul", [dout, norm], "tensor" if full_dout else "scalar")
        ax = self.node("Abs", [x])
        inside = self.node("Less", [ax, beta], "mask")
        lin = self.node("Div", [self.node("Mul", [g, x]), beta])
        sign = self.node("Sign", [x])
        out = self.node("Where", [inside, lin, self.node("Mul", [g, sign])])
        if escape == "x_output":
            self.graph_output(x)
        elif escape == "abs_used":
            self.publish(self.node("Relu", [ax]))
        self.publish(out)
        return Instance(escape or "smooth_l1", SMOOTH_L1_GRAD, out, "n" + sign[1:])

    def proximal(self, serial: int, escape: str | None = None) -> Instance:
        """Proximal update with constant alpha, t, k; `escape` names the one way a near miss is spoilt."""
        var = self.pick()
        delta = self.pick((var,))
        alpha = self.scalar("alpha", 0.01 + 1e-6 * serial)
        prox = self.node("Sub", [var, self.node("Mul", [alpha, delta])])
        divisor = self.scalar("k", 1.01 + 1e-6 * serial)
        if escape == "sgd":  # L2-only SGD: no shrink, not a proximal update
            out = self.node("Div", [prox, divisor])
            self.publish(out)
            return Instance(escape, PROXIMAL_GD, out, "n" + prox[1:])
        t = self.scalar("t", 0.001 + 1e-7 * serial)
        zero = self.scalar("zero", 0.0)
        if escape == "zero_overridable":  # Max(., zero) is no clamp when zero can be overridden
            self.graph_input(zero, scalar=True)
        shrunk = self.node("Max", [self.node("Sub", [self.node("Abs", [prox]), t]), zero])
        sign = self.node("Sign", [prox])
        out = self.node("Div", [self.node("Mul", [sign, shrunk]), divisor])
        if escape == "prox_used":
            self.publish(self.node("Tanh", [prox]))
        self.publish(out)
        return Instance(escape or "proximal", PROXIMAL_GD, out, "n" + sign[1:])

    def finish(self) -> None:
        """Sums every tensor nothing reads into a few graph outputs, so nothing is dead code."""
        left = [v for v in self.values if v in self.unused_set]
        for i in range(0, len(left), SUM_FANIN):
            chunk = left[i:i + SUM_FANIN]
            out = self.node("Sum", chunk) if len(chunk) > 1 else chunk[0]
            self.graph_output(out)


NEAR_MISS_SL1 = ("x_output", "abs_used", "beta_overridable")
NEAR_MISS_PROX = ("prox_used", "zero_overridable", "sgd")


def build_graph(nodes: int, seed: int = 0, pattern_share: float = 0.4) -> tuple[onnx.ModelProto, Planted]:
    """A graph of about `nodes` nodes; `pattern_share` of them sit in planted positive patterns."""
    b = _Builder(seed)
    rng = b.rng
    for i in range(16):
        b.publish(b.graph_input(f"in{i}"))
    go = b.graph_input("go", scalar=True)
    per_family = max(1, round(nodes * pattern_share / (SL1_NODES + PROX_NODES)))
    per_near_miss = max(1, per_family // 40)
    plan = ["sl1"] * per_family + ["prox"] * per_family
    plan += [f"sl1:{kind}" for kind in NEAR_MISS_SL1 for _ in range(per_near_miss)]
    plan += [f"prox:{kind}" for kind in NEAR_MISS_PROX for _ in range(per_near_miss)]
    rng.shuffle(plan)
    planted_nodes = (per_family * (SL1_NODES + PROX_NODES)
                     + per_near_miss * 9 * (len(NEAR_MISS_SL1) + len(NEAR_MISS_PROX)))
    filler_budget = max(len(plan), nodes - planted_nodes - nodes // (2 * SUM_FANIN))
    fill_per_slot = filler_budget / (len(plan) + 1)
    made = 0.0
    for serial, item in enumerate(plan):
        made += fill_per_slot
        while made >= 1:
            made -= b.filler()
        family, _, kind = item.partition(":")
        inst = b.smooth_l1(serial, go, kind or None) if family == "sl1" else b.proximal(serial, kind or None)
        (b.planted.near_misses if kind else b.planted.positives).append(inst)
    while made >= 1:
        made -= b.filler()
    b.finish()
    return b.model, b.planted


# --------------------------------------------------------------------------------------------
# onnxscript rules: the planted forms, with the constant checks our pass makes on them


def _ir_const(value) -> np.ndarray | None:
    """A true constant's value: never an initializer that is also a graph input."""
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


def _ir_scalar(value) -> float | None:
    c = _ir_const(value)
    if c is None or c.size != 1 or c.dtype.kind != "f":
        return None
    return float(c.reshape(-1)[0])


def _static_shape(value) -> tuple[int, ...] | None:
    shape = value.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


_FLOAT_DTYPES = ("FLOAT", "FLOAT16", "BFLOAT16")


def _same_tensor_kind(a, b) -> bool:
    return (a.dtype is not None and a.dtype.name in _FLOAT_DTYPES and a.dtype == b.dtype
            and _static_shape(a) is not None and _static_shape(a) == _static_shape(b))


def _smooth_l1_attrs(predict, dout, norm: float, beta: float) -> dict[str, object]:
    numel = int(np.prod(_static_shape(predict), dtype=np.int64))
    if numel and np.isclose(norm, 1.0 / numel, rtol=2.0**-23, atol=0.0):
        return {"sigma": beta, "reduction": "mean", "scale": 1.0}
    single = _static_shape(dout) is not None and int(np.prod(_static_shape(dout), dtype=np.int64)) == 1
    return {"sigma": beta, "reduction": "sum" if single else "none", "scale": norm}


def onnxscript_rules(as_function: bool = True) -> list:
    """RewriteRules for the two planted forms (imported lazily: onnxscript is a bench extra)."""
    from onnxscript.rewriter import RewriteRuleClassBase

    class SmoothL1GradRule(RewriteRuleClassBase):
        def pattern(self, op, predict, label, dout, norm, beta):
            x = op.Sub(predict, label)
            g = op.Mul(dout, norm)
            return op.Where(op.Less(op.Abs(x), beta), op.Div(op.Mul(g, x), beta), op.Mul(g, op.Sign(x)))

        def check(self, context, predict, label, dout, norm, beta, **_):
            b, n = _ir_scalar(beta), _ir_scalar(norm)
            if b is None or n is None or b < 0 or n == 0 or not np.isfinite(n):
                return False
            if not _same_tensor_kind(predict, label) or dout.dtype != predict.dtype:
                return False
            shape = _static_shape(dout)
            return shape is not None and (int(np.prod(shape, dtype=np.int64)) == 1 or shape == _static_shape(predict))

        def rewrite(self, op, predict, label, dout, norm, beta, **_):
            attrs = _smooth_l1_attrs(predict, dout, _ir_scalar(norm), _ir_scalar(beta))
            return op.SmoothL1LossGradV2(predict, label, dout, _domain=DOMAIN, **attrs)

    class ProximalGDRule(RewriteRuleClassBase):
        def pattern(self, op, var, alpha, delta, t, zero, k):
            prox = op.Sub(var, op.Mul(alpha, delta))
            return op.Div(op.Mul(op.Sign(prox), op.Max(op.Sub(op.Abs(prox), t), zero)), k)

        def check(self, context, var, alpha, delta, t, zero, k, **_):
            z = _ir_const(zero)
            if z is None or z.size == 0 or np.any(z != 0):
                return False
            if any(_ir_scalar(s) is None for s in (alpha, t, k)) or _ir_scalar(k) == 0:
                return False
            return _same_tensor_kind(var, delta)

        def rewrite(self, op, var, alpha, delta, t, zero, k, **_):
            # "folded": threshold t and divisor k as they are, no new initializers needed
            return op.ApplyProximalGradientDescent(var, alpha, t, k, delta, _domain=DOMAIN, scalar_form="folded")

    return [SmoothL1GradRule.rule(as_function=as_function), ProximalGDRule.rule(as_function=as_function)]


# --------------------------------------------------------------------------------------------
# end-to-end runs (file in, file out) and what they fused


def run_ours(src: Path, dst: Path) -> tuple[onnx.ModelProto, FusionReport]:
    loaded = load(src, background=True)
    # like the onnxscript rules, refuse a match whose intermediates other nodes read (the planted
    # abs_used near miss); by default the pass fuses it and computes |x| again for that reader
    fused, report = fuse_loaded(loaded, recompute_shared=False, beside=True)
    save(fused, dst, loaded.has_external_data)
    return fused, report


def run_onnxscript(src: Path, dst: Path, rules: list, infer_shapes: bool = False):
    """With `infer_shapes`, onnx_ir's shape inference pass first: the rules check shapes, which a
    model without value_info gives them only that way."""
    import onnx_ir
    from onnxscript.rewriter import rewrite

    model = onnx_ir.load(str(src))
    if infer_shapes:
        from onnx_ir.passes.common import ShapeInferencePass

        model = ShapeInferencePass()(model).model
    model = rewrite(model, pattern_rewrite_rules=rules)
    onnx_ir.save(model, str(dst))
    return model


@dataclass(frozen=True)
class Fused:
    op_type: str
    output: str
    replaced: frozenset[str] | None  # names of the original nodes it replaced, when known


def fusions_of_ours(model: onnx.ModelProto, report: FusionReport) -> list[Fused]:
    """Our fusions as the report lists them; refuses a report that disagrees with the model."""
    in_model = sorted((n.op_type, n.output[0]) for n in model.graph.node if n.domain == DOMAIN)
    in_report = sorted((f.op_type, f.output) for f in report.fusions)
    if in_model != in_report:
        raise LoweringError(f"the report lists {len(in_report)} fusions, the model has {len(in_model)} fused nodes")
    return [Fused(f.op_type, f.output, frozenset(f.replaced_nodes)) for f in report.fusions]


def fusions_of_ir(model) -> list[Fused]:
    bodies = {key: frozenset(n.name for n in f) for key, f in model.functions.items()}  # as_function keeps names
    return [Fused(n.op_type, n.outputs[0].name, bodies.get((n.domain, n.op_type, n.overload)))
            for n in model.graph if n.domain == DOMAIN]


def check_fusions(who: str, fusions: list[Fused], planted: Planted) -> list[str]:
    """Every planted positive fused exactly once into its op type; nothing else; no near miss.

    A fusion may legitimately reach past the planted output (our pass folds a constant scale that
    follows into the fused node), so an instance is identified by its core node among the nodes a
    fusion replaced, and by the output name only where those are not known.
    """
    by_core = {i.core: i for i in planted.positives + planted.near_misses}
    by_output = {i.output: i for i in planted.positives + planted.near_misses}
    taken: dict[Instance, int] = {}
    stray, wrong_type = [], []
    for f in fusions:
        if f.replaced is not None:
            hits = [by_core[n] for n in f.replaced if n in by_core]
        else:
            hits = [by_output[f.output]] if f.output in by_output else []
        if len(hits) != 1:
            stray.append(f.output)
        for i in hits:
            taken[i] = taken.get(i, 0) + 1
            if i.op_type != f.op_type:
                wrong_type.append(f.output)
    missed = [i for i in planted.positives if i not in taken]
    twice = [i for i in planted.positives if taken.get(i, 0) > 1]
    near = [i for i in planted.near_misses if i in taken]
    problems = []
    if missed:
        kinds = Counter(i.kind for i in missed)
        problems.append(f"{who}: {len(missed)} planted instances not fused ({dict(kinds)}; e.g. outputs "
                        f"{[i.output for i in missed[:4]]})")
    if near:
        problems.append(f"{who}: {len(near)} near misses fused ({dict(Counter(i.kind for i in near))})")
    if stray:
        problems.append(f"{who}: {len(stray)} fused nodes do not cover exactly one planted instance (e.g. {stray[:4]})")
    if twice or wrong_type:
        problems.append(f"{who}: {len(twice)} instances fused twice, {len(wrong_type)} fused to the wrong op type")
    return problems


@dataclass
class Graph:
    label: str
    src: Path
    nodes: int
    planted: Planted
    value_info: bool = True  # without it, onnxscript's rules get their shapes from onnx_ir's inference pass


@dataclass
class Row:
    graph: Graph
    ours: list[Fused] = field(default_factory=list)
    theirs: list[Fused] = field(default_factory=list)
    ours_s: float = float("inf")  # best over the rounds, with the proofs of an earlier run stored
    cold_s: float = float("inf")  # best over the rounds, with an empty proof store
    theirs_s: float = float("inf")
    ours_mb: float = 0.0  # peak resident memory of the tool's process, largest over the rounds
    theirs_mb: float = 0.0
    children_mb: float = 0.0  # what the tool's children hold alone (ours: the ONNX checker, the forked helpers)
    ours_error: str | None = None

    def problems(self) -> list[str]:
        found = [f"ours failed: {self.ours_error}"] if self.ours_error else []
        planted = self.graph.planted
        found += check_fusions("ours", self.ours, planted) + check_fusions("onnxscript", self.theirs, planted)
        if len(self.ours) != len(self.theirs):
            found.append(f"fusion counts differ: ours {len(self.ours)}, onnxscript {len(self.theirs)}")
        return [f"[{self.graph.label}] {p}" for p in found]


@dataclass
class Run:
    seconds: float
    fusions: list[Fused]
    peak_mb: float  # the tool's own process
    children_mb: float  # the largest of its child processes (our background ONNX checker)


def time_in_child(tool: str, src: Path, dst: Path, onnxscript_functions: bool, infer_shapes: bool = False,
                  proofs: Path | None = None) -> Run:
    """Time and fusions of one run of one tool in a fresh Python process, so neither tool runs on
    a heap or module set that an earlier run left behind (that alone moved our 200k time by
    5-10% when both shared one process). Ours keeps its proofs in `proofs`."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", tool, str(src), str(dst)]
    if onnxscript_functions:
        cmd.append("--onnxscript-functions")
    if infer_shapes:
        cmd.append("--infer-shapes")
    env = {**os.environ, "ASCEND_LOWERING_PROOF_CACHE": str(proofs) if proofs is not None else "off"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise LoweringError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    fusions = [Fused(op, out, None if replaced is None else frozenset(replaced)) for op, out,
               replaced in result["fusions"]]
    return Run(result["seconds"], fusions, result["peak_mb"], result["children_mb"])


class _ChildrenMemory:
    """The largest total, sampled every 50 ms, of the memory this process's children hold alone
    (private pages): the ONNX checker's interpreter, and the children the pass forks
    (lowering/beside.py), whose resident size would count the pages they share with this process.
    Where /proc has no such figures, the largest child's resident size instead."""

    def __init__(self) -> None:
        self._peak_kb = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        if not Path("/proc/self/smaps_rollup").exists():
            return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        return self._peak_kb / 1024

    def _sample(self) -> None:
        me = str(os.getpid())
        while not self._done.wait(0.05):
            total = 0
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[1] != me:  # the field after the state: the parent
                        continue
                    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
                except (OSError, IndexError):  # gone, or not ours to read
                    continue
                total += sum(int(line.split()[1]) for line in rollup.splitlines()
                             if line.startswith(("Private_Clean:", "Private_Dirty:")))
            self._peak_kb = max(self._peak_kb, total)


def child(tool: str, src: Path, dst: Path, onnxscript_functions: bool, infer_shapes: bool) -> None:
    """The child side of time_in_child: prints one JSON line with the time and the fusions."""
    rules = None if tool == "ours" else onnxscript_rules(as_function=onnxscript_functions)
    gc.collect()
    children = _ChildrenMemory()
    start = time.perf_counter()
    if tool == "ours":
        fused, report = run_ours(src, dst)
    else:
        rewritten = run_onnxscript(src, dst, rules, infer_shapes)
    seconds = time.perf_counter() - start
    children_mb = children.stop()
    # ru_maxrss is in KiB on Linux
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    fusions = fusions_of_ours(fused, report) if tool == "ours" else fusions_of_ir(rewritten)
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "children_mb": children_mb, "fusions": [
        [f.op_type, f.output, None if f.replaced is None else sorted(f.replaced)] for f in fusions]}))


def make_graph(label: str, size: int, seed: int, share: float, tmp: Path, value_info: bool = True) -> Graph:
    """The graph of `size` nodes, saved; without value_info when asked (as a post-processing tool
    or a hand edit leaves a model, when every type a match needs must be worked out)."""
    start = time.perf_counter()
    model, planted = build_graph(size, seed, share)
    if not value_info:
        del model.graph.value_info[:]
    src = tmp / f"synthetic_{label}.onnx"
    onnx.save(model, str(src))
    n = len(model.graph.node)
    del model
    print(f"[{label}] {n} nodes: {planted.count(SMOOTH_L1_GRAD)} SmoothL1 + {planted.count(PROXIMAL_GD)} proximal "
          f"planted, {len(planted.near_misses)} near misses; built in {time.perf_counter() - start:.1f} s", flush=True)
    return Graph(label, src, n, planted, value_info)


def measure(graphs: list[Graph], rounds: int, onnxscript_functions: bool, tmp: Path) -> list[Row]:
    """Best of `rounds` runs of each tool on each graph. Every round runs every (tool, graph)
    pair once, and every other round in reverse order (ours small, ours large, onnxscript small,
    onnxscript large, then back): the runs that a ratio compares are minutes apart at most, and a
    steady drift of the machine's speed falls on each pair alike."""
    rows = {g.label: Row(g) for g in graphs}
    # the cold runs of the first round come before the warm ones, which use the store they left
    cells = [(tool, g) for tool in ("ours-cold", "ours", "onnxscript") for g in graphs]
    stores: dict[str, Path] = {}
    for r in range(rounds):
        for tool, g in cells if r % 2 == 0 else cells[::-1]:
            row = rows[g.label]
            if tool.startswith("ours") and row.ours_error:
                continue
            proofs = None
            if tool == "ours-cold":
                proofs = stores[g.label] = Path(tempfile.mkdtemp(prefix="proofs_", dir=tmp))
            elif tool == "ours":
                proofs = stores[g.label]
            try:
                run = time_in_child(tool.removesuffix("-cold"), g.src, tmp / "out.onnx", onnxscript_functions,
                                    not g.value_info, proofs)
            except LoweringError as exc:
                if tool == "onnxscript":
                    raise
                row.ours_error = str(exc)
                print(f"[{g.label}] {tool} FAILED: {exc}", flush=True)
                continue
            print(f"[{g.label}] round {r + 1} {tool}: {run.seconds:.2f} s, {run.peak_mb:.0f} MB", flush=True)
            if tool == "ours-cold":
                row.cold_s = min(row.cold_s, run.seconds)
            elif tool == "ours":
                row.ours_s, row.ours = min(row.ours_s, run.seconds), run.fusions
                row.ours_mb, row.children_mb = max(row.ours_mb, run.peak_mb), max(row.children_mb, run.children_mb)
            else:
                row.theirs_s, row.theirs = min(row.theirs_s, run.seconds), run.fusions
                row.theirs_mb = max(row.theirs_mb, run.peak_mb)
    return list(rows.values())


def profile_ours(src: Path, dst: Path, top: int = 25) -> None:
    """cProfile of one run of our pass: where the time goes, by cumulative and by own time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(run_ours, src, dst)
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small graphs (2k and 10k nodes), one run each: a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2,
                        help="runs of each tool on each graph, each in a fresh process; the best is kept")
    parser.add_argument("--pattern-share", type=float, default=0.4,
                        help="share of the nodes inside planted positives; at 0.4 the 200k graph gets about 9400 "
                             "fusions (onnx.checker refuses models with more than 10000 local functions)")
    parser.add_argument("--onnxscript-functions", action="store_true",
                        help="let onnxscript also write a function body per fusion (as_function=True), as ours does; "
                             "its extraction scans the whole graph per fusion, so use it with --quick")
    parser.add_argument("--profile", action="store_true", help="only profile our pass (cProfile) on the small graph")
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "SRC", "DST"), help=argparse.SUPPRESS)
    parser.add_argument("--infer-shapes", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        tool, src, dst = args.child
        child(tool, Path(src), Path(dst), args.onnxscript_functions, args.infer_shapes)
        return 0
    sizes = [("2k", 2_000), ("10k", 10_000)] if args.quick else [("40k", 40_000), ("200k", 200_000)]
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="pass_speed_") as tmp:
            label, size = sizes[0]
            model, _ = build_graph(size, args.seed, args.pattern_share)
            src = Path(tmp) / f"synthetic_{label}.onnx"
            onnx.save(model, str(src))
            print(f"[{label}] {len(model.graph.node)} nodes, profiling our pass")
            del model
            profile_ours(src, Path(tmp) / "ours.onnx")
        return 0
    # both tools share the machine with whatever else runs; say how busy it was
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="pass_speed_") as tmp:
        graphs = [make_graph(label, size, args.seed, args.pattern_share, Path(tmp)) for label, size in sizes]
        label, size = sizes[-1]
        graphs.append(make_graph(f"{label}-novi", size, args.seed, args.pattern_share, Path(tmp), value_info=False))
        rows = measure(graphs, 1 if args.quick else args.rounds, args.onnxscript_functions, Path(tmp))
    print()
    print(f"onnxscript writes function bodies: {'yes' if args.onnxscript_functions else 'no (ours does)'}")
    print("peak memory: each tool's process; children MB: what ours's children hold alone at most (the ONNX "
          "checker, and the helpers the pass forks on a large graph)")
    print("ours cold: with an empty proof store (a fresh install's first run: only the shipped proofs); "
          "ours: with the proofs that run stored")
    print(f"{'graph':<10} {'nodes':>8} {'our fusions':>12} {'onnxscript fusions':>19} {'ours cold s':>12} "
          f"{'ours s':>8} {'onnxscript s':>13} {'ratio':>7} {'ratio cold':>11} {'ours MB':>8} {'children MB':>12} "
          f"{'onnxscript MB':>14}")
    for r in rows:
        print(f"{r.graph.label:<10} {r.graph.nodes:>8} {len(r.ours):>12} {len(r.theirs):>19} {r.cold_s:>12.2f} "
              f"{r.ours_s:>8.2f} {r.theirs_s:>13.2f} {r.theirs_s / r.ours_s:>6.2f}x {r.theirs_s / r.cold_s:>10.2f}x "
              f"{r.ours_mb:>8.0f} {r.children_mb:>12.0f} {r.theirs_mb:>14.0f}")
    small, large, bare = rows
    print(f"our {large.graph.label}/{small.graph.label} time ratio: {large.ours_s / small.ours_s:.2f} "
          f"(node ratio {large.graph.nodes / small.graph.nodes:.2f}; goal <= 5.5)")
    for row in (large, bare):
        print(f"onnxscript/ours on {row.graph.label}: {row.theirs_s / row.ours_s:.2f}x (goal >= 5x); "
              f"peak memory ours/onnxscript {row.ours_mb / row.theirs_mb:.2f} (goal <= 1), "
              f"with our children's {(row.ours_mb + row.children_mb) / row.theirs_mb:.2f}")
    problems = [p for r in rows for p in r.problems()]
    for p in problems:
        print(f"MISMATCH {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
