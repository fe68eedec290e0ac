"""Hypothesis SmoothL1LossGradV2 for a region around x = predict - label.

Binding: predict and label are the two sides of the difference (both orders are tried: the
gradient with respect to label is the one with respect to predict with the two swapped); dout is
the one other runtime leaf, or 1 when there is none. Attributes come from evaluation with dout = 1,
label = 0: the plateau value c at a very large x is scale * norm, the slope near 0 gives sigma
(c * x / value), a plateau already at a tiny x means sigma = 0; a region that divides by a numel
it computes is a "mean" whose scale is c * n.
"""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import onnx

from contracts.fused_ops import SMOOTH_L1_GRAD, smooth_l1_grad_reference

from ...graph import GraphIndex
from ..base import NoMatch, broadcasts_to, is_single_element, named_apart, require, same_shape, shapes_differ
from ..smooth_l1_grad import broadcast_caveats, split_reduction
from .evaluate import ELEMENTWISE
from .hypothesis import (
    Counterexample,
    Proposal,
    evaluate,
    magnitudes,
    nudges,
    numel_leaves,
    points,
    tensor_type,
)
from .proof import Probe
from .region import Region

_EPS: dict[int, float] = {onnx.TensorProto.FLOAT: 2.0**-23, onnx.TensorProto.FLOAT16: 2.0**-10,
                          onnx.TensorProto.BFLOAT16: 2.0**-7}
_TINY = 2.0**-40  # a difference below any sigma a model uses, far above float64's smallest


def propose(index: GraphIndex, region: Region, rng: np.random.Generator) -> list[Proposal]:
    u, w = region.tensors
    runtime = region.scalars + region.others
    require(len(runtime) <= 1, f"reads runtime values besides predict, label and dout ({', '.join(sorted(runtime))})")
    dout = runtime[0] if runtime else None
    proposals, refusals = [], []
    for predict, label in ((u, w), (w, u)):  # one order may bind where the other cannot (a broadcast label)
        try:
            proposals.append(_bind(index, region, predict, label, dout, rng))
        except NoMatch as exc:
            refusals.append(exc)
    if not proposals:
        raise refusals[0]
    return proposals


def _bind(index: GraphIndex, region: Region, predict: str, label: str, dout: str | None,
          rng: np.random.Generator) -> Proposal:
    dtype = tensor_type(index, region, [predict, label] + ([dout] if dout else []), "predict and label")
    label_broadcasts = not same_shape(index, predict, label)
    # dims an exporter named apart: each is expanded to the other's shape (smooth_l1_grad._finish)
    apart = label_broadcasts and not broadcasts_to(index, label, predict) and named_apart(index, predict, label)
    require(not label_broadcasts or apart or broadcasts_to(index, label, predict),
            shapes_differ(index, predict, label, "predict and label") + "; only a label that broadcasts to "
            "predict's shape is taken")
    require(dout is None or is_single_element(index, dout) or broadcasts_to(index, dout, predict),
            "dout's shape does not broadcast to predict's (the gradient of predict has predict's shape)")
    # the fused op's numel is that of the expanded predict, which an element count the region
    # reads need not be (the numel of a predict that broadcast against label is smaller)
    require(not apart or not region.numels, "divides by an element count while predict and label, their dims "
            "named apart, are expanded to the shape of their broadcast, whose numel it need not be")
    inside = set(region.nodes)
    for source in region.numels.values():
        require(source == predict or (source == label and not label_broadcasts) or same_shape(index, source, predict)
                or index.producer.get(source) in inside,
                f"divides by the element count of {source}, which is not predict's")
    mags = magnitudes(region)
    c, sigma = _plateau_and_sigma(index, region, predict, label, dout, mags)
    # a bare sign(a - b) that more elementwise math reads is a part of some other function, not a
    # gradient to fuse (an L1 loss's gradient with dout folded to 1 ends there)
    require(sigma > 0 or dout is not None or not any(index.nodes[c].op_type in ELEMENTWISE
                                                     for c in index.consumers.get(region.output, ())),
            "computes sign(predict - label) alone, with no dout, and more elementwise math reads it")
    runtime_mean = bool(region.numels)
    if runtime_mean:
        reduction, scale, norm = "mean", c * _INFER_N, None
    else:
        single = dout is None or is_single_element(index, dout)
        numel = None if apart else index.numel(predict)  # as in smooth_l1_grad._finish
        reduction, scale = split_reduction(numel, c, False, sigma, single, _EPS[dtype])
        norm = 1.0 / numel if reduction == "mean" and numel else 1.0  # split_reduction: mean needs numel
    scale = float(np.float32(scale))
    attrs = {"sigma": sigma, "reduction": reduction, "scale": scale}

    def contract(leaves: dict[str, np.ndarray], in_float32: bool = False) -> np.ndarray:
        # float64 either way: no piece of it cancels at the kink, so the kernel's float32 differs
        # from it by a relative rounding only
        p = leaves[predict]
        d = leaves[dout] if dout else np.float64(1.0)
        factor = scale * (1.0 / p.size if norm is None else norm)
        return smooth_l1_grad_reference(p, leaves[label], d, sigma, "sum", factor)

    roles = {predict: "predict", label: "label", **({dout: "dout"} if dout else {})}
    probes = _probes(index, region, predict, label, dout, sigma, mags, rng)
    dout_input = dout if dout else _one(dtype)
    return Proposal(SMOOTH_L1_GRAD, attrs, [predict, label, dout_input], roles, contract, probes, dtype,
                    expand={0: 1, 1: 0} if apart else {}, caveats=broadcast_caveats(index, predict, label, dout, apart))


_INFER_N = 4  # element count of the inference probes


def _plateau_and_sigma(index: GraphIndex, region: Region, predict: str, label: str, dout: str | None,
                       mags: list[float]) -> tuple[float, float]:
    big = 2.0**20 * max([1.0] + mags)
    xs = np.array([big, -big, _TINY, -_TINY])
    leaves = {predict: xs, label: np.zeros(_INFER_N), **numel_leaves(index, region, _INFER_N)}
    if dout:
        # a single element is drawn 0-D whatever its rank ([1, 1]): the probes are one axis of points
        leaves[dout] = np.ones(() if is_single_element(index, dout) else _INFER_N)
    v = evaluate(index, region, leaves)
    v = np.broadcast_to(v, (_INFER_N,))
    c = float(v[0])
    if not np.isfinite(c) or c == 0:
        raise Counterexample(f"differs from every SmoothL1LossGradV2 at predict={big:.9g}, label=0, dout=1: the graph "
                             f"gives {c:.9g}, the fused op a nonzero constant (scale * norm)")
    if abs(float(v[2]) - c) <= 1e-9 * abs(c):
        return c, 0.0
    rough = abs(c * _TINY / float(v[2])) if v[2] != 0 and np.isfinite(v[2]) else 1.0
    if not np.isfinite(rough) or rough == 0:
        return c, 1.0
    # again at a quarter of it, inside the linear piece but far from 0, where a graph that
    # subtracts two near-equal terms (JAX's tie-split minimum) loses no digits
    x = rough / 4
    leaves[predict] = np.array([x, -x, x, -x])
    w = float(np.broadcast_to(evaluate(index, region, leaves), (_INFER_N,))[0])
    sigma = abs(c * x / w) if w != 0 and np.isfinite(w) else rough
    return c, float(np.float32(sigma)) if np.isfinite(sigma) else 1.0


def _probes(index: GraphIndex, region: Region, predict: str, label: str, dout: str | None, sigma: float,
            mags: list[float], rng: np.random.Generator) -> Iterator[Probe]:
    scalar_douts = [1.0, -0.75, 2.5, 0.0]
    for k, d in enumerate(scalar_douts):
        xs = points(rng, [sigma], mags, extra=3 * k)
        n = len(xs)
        if k in (0, 3):
            lab = np.zeros(n)
        elif k == 1:
            lab = np.round(rng.uniform(-4, 4, n) * 8) / 8
        else:
            lab = rng.uniform(-4, 4, n)
        pred = lab + xs
        if k == 0:
            at, by = nudges([sigma] + mags)
            pred, lab = np.concatenate([pred, at]), np.concatenate([lab, by])
            n = len(pred)
        if k == 2:  # non-finite labels
            lab[-3:] = [np.nan, np.inf, -np.inf]
        leaves = {predict: pred, label: lab, **numel_leaves(index, region, n)}
        if dout:
            if is_single_element(index, dout):
                leaves[dout] = np.asarray(d)
            else:
                leaves[dout] = rng.uniform(0.25, 4, n) * rng.choice([-1.0, 1.0], n)
        yield Probe({**region.constants, **leaves})


def _one(dtype: int) -> np.ndarray:
    if dtype == onnx.TensorProto.BFLOAT16:
        return np.asarray(1.0, ml_dtypes.bfloat16)
    return np.asarray(1.0, onnx.helper.tensor_dtype_to_np_dtype(dtype))
