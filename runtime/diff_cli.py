"""What `lower diff UNFUSED FUSED` and `lower MODEL --target T --verify` call.

    add_input_options(parser)                  adds --inputs, --seed, --shape, --edge-nonfinite,
                                               --json, --backend
    run_diff(unfused_path, fused_path, args)   -> exit code
    run_verify(unfused_model, fused_model, target, args) -> exit code

Exit codes: 0 every comparison PASSes, 1 any FAILs, 2 bad input (one line on stderr). The table
goes to stdout, the same data to --json FILE, progress lines to stderr for large inputs. The
target for `lower diff` is args.target when the parser has one, else the default target.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx

from codegen.errors import CodegenError
from codegen.targets import UnknownTargetError, get_target
from lowering.errors import LoweringError
from lowering.loading import load
from runtime.backend import DEFAULT_TARGET, BackendError
from runtime.backends import backend_names, get_backend
from runtime.diff import diff_models
from runtime.fused_node import FusedNodeError
from runtime.graph_exec import GraphExecError
from runtime.inputs import (
    InputError,
    edge_hints,
    generate_inputs,
    load_npz,
    model_input_specs,
    parse_shape_options,
    resolve_shapes,
)
from runtime.interpreter import KernelExecutionError
from runtime.ort_exec import OrtRunError
from runtime.progress import LONG_RUN_ELEMENTS, Progress
from runtime.report import DiffReport, format_table

DEFAULT_SEED = 0
_BAD_INPUT = (InputError, LoweringError, BackendError, OrtRunError, GraphExecError, FusedNodeError,
              UnknownTargetError, OSError)


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """The options that pick the inputs and backend of a diff (shared by diff and --verify)."""
    g = parser.add_argument_group("diff inputs and backend")
    g.add_argument("--inputs", metavar="FILE.npz",
                   help="input values: an .npz with one array per model input (default: generated)")
    g.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N",
                   help=f"seed for generated inputs (default {DEFAULT_SEED})")
    g.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="shape of an input with dynamic dims, e.g. --shape x=8,1024 (repeatable)")
    g.add_argument("--edge-nonfinite", action="store_true",
                   help="also put inf, -inf and NaN among the generated edge values")
    g.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    g.add_argument("--backend", default="cpu", choices=backend_names(),
                   help="where fused nodes run: cpu (IR interpreter, default), twin (the emitted AscendC "
                        "compiled with g++ against our CPU header set) or npu (CANN device)")


def _feeds(unfused: onnx.ModelProto, fused: onnx.ModelProto, args: argparse.Namespace
           ) -> tuple[dict[str, np.ndarray], str]:
    specs = model_input_specs(unfused)
    fused_names = [s.name for s in model_input_specs(fused)]
    if sorted(fused_names) != sorted(s.name for s in specs):
        raise InputError(f"the models take different inputs: unfused {[s.name for s in specs]}, "
                         f"fused {fused_names}")
    if getattr(args, "inputs", None):
        if getattr(args, "shape", None):
            raise InputError("--shape applies to generated inputs; the .npz already fixes every shape")
        return load_npz(args.inputs, specs), args.inputs
    shapes = resolve_shapes(specs, parse_shape_options(getattr(args, "shape", None)))
    seed = getattr(args, "seed", DEFAULT_SEED)
    feeds = generate_inputs(specs, shapes, seed, getattr(args, "edge_nonfinite", False), edge_hints(fused))
    return feeds, f"generated, seed {seed}" + (", with inf/NaN" if getattr(args, "edge_nonfinite", False) else "")


def _diff(unfused: onnx.ModelProto, fused: onnx.ModelProto, unfused_name: str, fused_name: str,
          target: str, args: argparse.Namespace, prog: str) -> int:
    try:
        get_target(target)
        backend = get_backend(getattr(args, "backend", "cpu") or "cpu")
        feeds, source = _feeds(unfused, fused, args)
        total = sum(int(np.asarray(v).size) for v in feeds.values())
        progress = Progress(prog, enabled=total >= LONG_RUN_ELEMENTS)
        report = DiffReport(unfused_name, fused_name, backend.name, target, source,
                            {k: list(np.asarray(v).shape) for k, v in feeds.items()})
        diff_models(unfused, fused, feeds, backend, target, report, progress)
    except _BAD_INPUT as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except (CodegenError, KernelExecutionError) as exc:
        print(f"{prog}: FAIL: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(format_table(report))
    if getattr(args, "json", None):
        try:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(report.to_json_text())
        except OSError as exc:
            print(f"{prog}: error: cannot write --json {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0 if report.passed else 1


def run_diff(unfused_path: str | os.PathLike, fused_path: str | os.PathLike, args: argparse.Namespace) -> int:
    """`lower diff UNFUSED FUSED`: load both models and diff them."""
    prog = "lower diff"
    try:
        unfused = load(unfused_path).model
        fused = load(fused_path).model
    except LoweringError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    target = getattr(args, "target", None) or DEFAULT_TARGET
    return _diff(unfused, fused, str(unfused_path), str(fused_path), target, args, prog)


def run_verify(unfused_model: onnx.ModelProto, fused_model: onnx.ModelProto, target: str,
               args: argparse.Namespace) -> int:
    """`lower MODEL --target T --verify`: diff the model just fused against its original."""
    return _diff(unfused_model, fused_model, "model", "fused model", target, args, "lower --verify")
