"""What `lower diff UNFUSED FUSED` and `lower MODEL --target T --verify` call.

    add_input_options(parser)                  adds --inputs, --seed, --shape, --edge-nonfinite,
                                               --json, --backend
    check_options(args)                        the options alone; raises InputError (a LoweringError)
    check_input_options(args, model)           the options against the model's inputs, before any
                                               work; raises InputError (a LoweringError)
    run_diff(unfused_path, fused_path, args)   -> exit code
    run_verify(unfused_model, fused_model, target, args) -> exit code

Exit codes: 0 every comparison PASSes, 1 any FAILs, 2 bad input (one line on stderr). The table
goes to stdout, the same data to --json FILE, progress lines to stderr when the run takes more
than a couple of seconds. With args.quiet (lower's -q) nothing is printed on success and only
the failures on FAIL. The target for `lower diff` is args.target when the parser has one, else
the default target. Everything printed from the model is escaped and shortened (printable).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from codegen.errors import CodegenError
from codegen.targets import UnknownTargetError, get_target
from contracts.errors import LoweringError
from contracts.fused_ops import DOMAIN, OP_SPECS
from lowering.loading import load
from lowering.terminal import printable
from runtime.backend import DEFAULT_TARGET, Backend, BackendError
from runtime.backends import backend_names, get_backend
from runtime.contrib_ops import ContribOpError
from runtime.diff import diff_models
from runtime.fused_node import FusedNodeError
from runtime.graph_exec import GraphExecError
from runtime.inputs import (
    InputError,
    check_npz,
    check_seed,
    edge_hints,
    generate_inputs,
    load_npz,
    model_input_specs,
    npz_headers,
    parse_shape_options,
    resolve_shapes,
)
from runtime.interpreter import KernelExecutionError
from runtime.ort_exec import OrtRunError
from runtime.progress import Progress
from runtime.report import DiffReport, format_failures, format_table, partial_line

DEFAULT_SEED = 0
INPUT_OPTIONS = "diff inputs and backend"  # the title of add_input_options' argument group
MESSAGE_WIDTH = 400  # an error line is cut to this many characters (a 5000-character node name)
_BAD_INPUT = (LoweringError, BackendError, OrtRunError, GraphExecError, FusedNodeError, ContribOpError,
              UnknownTargetError, OSError)


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """The options that pick the inputs and backend of a diff (shared by diff and --verify)."""
    g = parser.add_argument_group(INPUT_OPTIONS)
    g.add_argument("--inputs", metavar="FILE.npz",
                   help="input values: an .npz with one array per model input (default: generated)")
    g.add_argument("--seed", type=int, metavar="N",
                   help=f"seed for generated inputs, a non-negative integer (default {DEFAULT_SEED})")
    g.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="shape of an input with dynamic dims, e.g. --shape x=8,1024 (repeatable)")
    g.add_argument("--edge-nonfinite", action="store_true",
                   help="also put inf, -inf and NaN among the generated edge values")
    g.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    # defaults are None where a caller must tell "not given" from the default value (lower
    # refuses diff options without --verify); the checks below fill them in
    g.add_argument("--backend", choices=backend_names(),
                   help="where fused nodes run: cpu (IR interpreter, default), twin (the emitted AscendC "
                        "compiled with g++ against our CPU header set) or npu (CANN device)")


@dataclass(frozen=True)
class InputOptions:
    """The checked diff options: what to run on and where."""

    backend: Backend
    npz: str | None  # --inputs, or None for generated inputs
    shapes: dict[str, tuple[int, ...]]  # of the generated inputs (empty with --inputs)
    seed: int
    nonfinite: bool
    json: str | None


def _check_json_path(path: str) -> None:
    shown = printable(path)
    if os.path.isdir(path):
        raise InputError(f"--json {shown}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"--json {shown}: no folder {printable(parent)}")
    if not os.access(path if os.path.exists(path) else parent, os.W_OK):
        raise InputError(f"--json {shown}: not writable")


def check_options(args: argparse.Namespace) -> None:
    """Checks the diff options that need no model: values, combinations, files. Raises InputError."""
    npz = getattr(args, "inputs", None)
    seed = getattr(args, "seed", None)
    if seed is not None:
        check_seed(seed)
    shapes = parse_shape_options(getattr(args, "shape", None))
    if npz:
        given = [name for name, used in (("--shape", bool(shapes)), ("--seed", seed is not None),
                                         ("--edge-nonfinite", getattr(args, "edge_nonfinite", False))) if used]
        if given:
            raise InputError(f"{given[0]} applies to generated inputs; --inputs already fixes every value")
        npz_headers(npz)
    backend = getattr(args, "backend", None) or "cpu"
    if backend not in backend_names():
        raise InputError(f"--backend {printable(str(backend))}: unknown; known backends: "
                         f"{', '.join(backend_names())}")
    if getattr(args, "json", None):
        _check_json_path(args.json)


def check_input_options(args: argparse.Namespace, model: onnx.ModelProto) -> InputOptions:
    """Checks every diff option (--inputs, --shape, --seed, --edge-nonfinite, --backend, --json)
    against `model`'s inputs before any work starts; raises InputError, a LoweringError (exit 2).

    `lower --verify` calls it before lowering, `lower diff` before running anything."""
    check_options(args)
    specs = model_input_specs(model)
    npz = getattr(args, "inputs", None) or None
    shapes: dict[str, tuple[int, ...]] = {}
    if npz:
        check_npz(npz, specs)
    else:
        shapes = resolve_shapes(specs, parse_shape_options(getattr(args, "shape", None)))
    name = getattr(args, "backend", None) or "cpu"
    # the npu backend says which toolkit and packages it uses; -q keeps only its warnings
    options = {"quiet": True} if name == "npu" and getattr(args, "quiet", False) else {}
    try:
        backend = get_backend(name, **options)
    except BackendError as exc:
        raise InputError(f"--backend: {exc}") from None
    seed = getattr(args, "seed", None)
    return InputOptions(backend, npz, shapes, DEFAULT_SEED if seed is None else seed,
                        bool(getattr(args, "edge_nonfinite", False)), getattr(args, "json", None))


def _feeds(unfused: onnx.ModelProto, fused: onnx.ModelProto, opts: InputOptions
           ) -> tuple[dict[str, np.ndarray], str]:
    specs = model_input_specs(unfused)
    fused_names = [s.name for s in model_input_specs(fused)]
    if sorted(fused_names) != sorted(s.name for s in specs):
        raise InputError("the models take different inputs: unfused "
                         f"{printable(', '.join(s.name for s in specs))}; fused {printable(', '.join(fused_names))}")
    if opts.npz:
        return load_npz(opts.npz, specs), opts.npz
    feeds = generate_inputs(specs, opts.shapes, opts.seed, opts.nonfinite, edge_hints(fused))
    return feeds, f"generated, seed {opts.seed}" + (", with inf/NaN" if opts.nonfinite else "")


def _check_fused_op_types(fused: onnx.ModelProto) -> None:
    """A node of the fused ops' domain that no registered op type names is bad input, not a bug."""
    for node in fused.graph.node:
        if node.domain == DOMAIN and node.op_type not in OP_SPECS:
            raise InputError(f"node '{printable(node.name)}': {DOMAIN} has no op {printable(node.op_type)} "
                             f"(known: {', '.join(OP_SPECS)})")


def _say(prog: str, kind: str, exc: BaseException) -> None:
    print(f"{prog}: {kind}: {printable(str(exc), MESSAGE_WIDTH)}", file=sys.stderr)


ModelPair = Callable[[Progress], tuple[onnx.ModelProto, onnx.ModelProto]]


def _diff(models: ModelPair, unfused_name: str, fused_name: str, target: str, args: argparse.Namespace,
          prog: str, checked: InputOptions | None = None) -> int:
    """Check, run and print one diff; `models` gets the two models (reading them counts as part
    of the run, for progress). Errors are printed after the progress thread has stopped."""
    quiet = bool(getattr(args, "quiet", False))
    try:
        with Progress(prog, enabled=not quiet) as progress:
            unfused, fused = models(progress)
            _check_fused_op_types(fused)
            opts = checked or check_input_options(args, unfused)
            progress.stage("reading --inputs" if opts.npz else "generating inputs")
            feeds, source = _feeds(unfused, fused, opts)
            report = DiffReport(unfused_name, fused_name, opts.backend.name, target, source,
                                {k: list(np.asarray(v).shape) for k, v in feeds.items()})
            diff_models(unfused, fused, feeds, opts.backend, target, report, progress,
                        assume_finite=bool(getattr(args, "assume_finite", False)))
    except _BAD_INPUT as exc:
        _say(prog, "error", exc)
        return 2
    except (CodegenError, KernelExecutionError) as exc:
        _say(prog, "FAIL", exc)
        return 1
    if not quiet:
        sys.stdout.write(format_table(report))
    elif not report.passed:
        sys.stdout.write(format_failures(report))
    elif report.partial:  # a caveat of the success, so -q prints it too
        sys.stdout.write(partial_line(report) + "\n")
    if opts.json:
        try:
            with open(opts.json, "w", encoding="utf-8") as fh:
                fh.write(report.to_json_text())
        except OSError as exc:
            print(f"{prog}: error: cannot write --json {printable(opts.json)}: "
                  f"{printable(exc.strerror or str(exc))}", file=sys.stderr)
            return 2
    if report.rows and not report.ran():
        print(f"{prog}: error: nothing could be checked (see the partial check above)", file=sys.stderr)
        return 2
    return 0 if report.passed else 1


def run_diff(unfused_path: str | os.PathLike, fused_path: str | os.PathLike, args: argparse.Namespace) -> int:
    """`lower diff UNFUSED FUSED`: check the options, load both models and diff them."""
    prog = "lower diff"
    target = getattr(args, "target", None) or DEFAULT_TARGET
    try:
        get_target(target)
        check_options(args)
    except (LoweringError, UnknownTargetError) as exc:
        _say(prog, "error", exc)
        return 2

    def models(progress: Progress) -> tuple[onnx.ModelProto, onnx.ModelProto]:
        progress.stage("reading the models")
        return load(unfused_path).model, load(fused_path).model

    return _diff(models, str(unfused_path), str(fused_path), target, args, prog)


def run_verify(unfused_model: onnx.ModelProto, fused_model: onnx.ModelProto, target: str,
               args: argparse.Namespace, checked: InputOptions | None = None) -> int:
    """`lower MODEL --target T --verify`: diff the model just fused against its original; `checked`:
    the options check_input_options already checked (and the backend it made) before lowering."""
    prog = "lower --verify"
    try:
        get_target(target)
    except UnknownTargetError as exc:
        _say(prog, "error", exc)
        return 2
    return _diff(lambda progress: (unfused_model, fused_model), "model", "fused model", target, args, prog,
                 checked)
