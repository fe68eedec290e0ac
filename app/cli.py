"""`lower`: fuse a model, write the fused model, the report and the AscendC kernels; diff graphs.

Exit codes: 0 success, 1 a verification FAILed, 2 bad input (one line on stderr), 3 internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

import onnx

from codegen.api import KernelArtifact, build_kernels, emit_kernels, format_ir
from codegen.errors import CodegenError
from codegen.project import operator_projects
from codegen.targets import UnknownTargetError, get_target, known_targets
from contracts.errors import LoweringError, ToolError
from lowering.api import fuse_loaded
from lowering.loading import LoadedModel, load, save
from lowering.report import FusionReport, more_line
from lowering.terminal import printable

from .diff_cli import (
    INPUT_OPTIONS,
    add_input_options,
    check_input_options,
    check_options,
    run_diff,
    run_verify,
)
from .outdir import COMPLETE, OutputTransaction

SUMMARY_LIMIT = 20  # fusions, near misses and kernels listed on the terminal, each

DESCRIPTION = """\
Find SmoothL1-loss-backward and proximal-gradient-descent subgraphs in an ONNX model, fuse each
into one custom node (domain com.huawei.ascend: SmoothL1LossGradV2, ApplyProximalGradientDescent),
and generate an AscendC custom-operator project per fused op type. Calls of model-local functions
that could hold a pattern are inlined to look inside them; those whose nodes fused stay inlined.
The bodies of If, Loop and Scan nodes are fused too; the report names the body of each fusion.

Writes into OUTDIR (default: <model stem>.lowered in the current directory):
  <stem>.fused.onnx   the fused model; every fused node carries an ONNX function with the original
                      subgraph, so onnxruntime still runs it
  report.json         fusions (pattern, node, op type, replaced nodes, attributes), near-matches
                      that were not fused and why, and the generated kernels
  kernels/<op>/       one AscendC custom-operator project per fused op type (msopgen layout: op_host,
                      op_kernel, CMakePresets.json, build.sh); kernel variants are its tiling keys
OUTDIR must be new, empty, or an earlier output of lower (--force: any folder; lower's files are
added beside the others). The input model is never modified, and no file lower did not write is
overwritten or deleted. The files are built in a folder beside OUTDIR and moved in when complete,
so an interrupted or failed run leaves the earlier output or nothing that looks complete; while a
run writes OUTDIR, another run into it stops at once.

The diff options below apply with --verify only.

Also: `lower diff UNFUSED FUSED [options]` compares a fused model with the unfused one
(run `lower diff --help`)."""

EXIT_CODES = """\
exit codes:
  0    success (--verify of a graph onnxruntime cannot run whole: every comparison that ran
       passed, and a "partial check:" line says what could not be checked and why)
  1    --verify: a comparison FAILed the precision standard
  2    bad input or request (a path, a permission, an option, the model, nothing that could be
       checked): one line on stderr
  3    internal error, a bug of lower's (set LOWER_DEBUG=1 for the traceback)
  130  interrupted (SIGINT); 143 terminated (SIGTERM): nothing of the run is left behind"""



def _targets() -> tuple[str, ...]:
    return known_targets()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise LoweringError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lower", description=DESCRIPTION, epilog=EXIT_CODES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="path to an .onnx model (external data is read from its folder)")
    parser.add_argument("--target", required=True, metavar="T",
                        help=f"Ascend SoC to generate kernels for: {', '.join(_targets())}")
    parser.add_argument("-o", "--output", metavar="OUTDIR", type=Path,
                        help="output directory (default: ./<model stem>.lowered)")
    parser.add_argument("--emit", choices=("all", "onnx", "ir"), default="all",
                        help="all: fused model, report and kernels (default); onnx: fused model and "
                             "report only; ir: print the kernel IR of every kernel, write nothing")
    parser.add_argument("--force", action="store_true",
                        help="write into OUTDIR even if it holds files lower did not write (they are "
                             "left as they are)")
    parser.add_argument("--verify", action="store_true",
                        help="after lowering, run the fused model (fused nodes through their kernels) "
                             "against the original under onnxruntime and check the CANN precision standard; "
                             "exit 1 on any FAIL")
    shared = parser.add_mutually_exclusive_group()
    shared.add_argument("--no-recompute-shared", dest="recompute_shared", action="store_false",
                        help="refuse a match whose intermediates other nodes also read (a forward loss sharing "
                             "|x| with its gradient); by default it fuses and the nodes that compute those "
                             "intermediates stay for their other readers (the report counts them)")
    shared.add_argument("--recompute-shared", dest="recompute_shared", action="store_true", default=True,
                        help=argparse.SUPPRESS)  # the default since fusion by meaning; kept for scripts
    parser.add_argument("--no-meaning", dest="by_meaning", action="store_false",
                        help="fuse only the spelled-out forms, not regions recognised by what they compute "
                             "(docs/recognition_by_meaning.md)")
    parser.add_argument("--assume-finite", action="store_true",
                        help="also fuse regions that equal the fused op except where an input is +-inf or NaN "
                             "(as -ffinite-math-only); the report marks each such fusion and --verify skips "
                             "those positions (docs/proof.md)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    add_input_options(parser)
    return parser


def _add_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("unfused", help="the original model")
    parser.add_argument("fused", help="the fused model (e.g. OUTDIR/<stem>.fused.onnx from lower)")
    parser.add_argument("--target", metavar="T",
                        help=f"target whose schedule the kernels run with: {', '.join(_targets())}")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when every comparison PASSes, "
                        "only the failures otherwise")
    parser.add_argument("--assume-finite", action="store_true",
                        help="leave out the positions where an input or the reference is +-inf or NaN (for a "
                             "model lowered with --assume-finite), and say how many")
    add_input_options(parser)
    parser.set_defaults(run=_run_diff)


_DIFF_DESCRIPTION = (
    "Compare a fused model with its unfused original. onnxruntime runs the unfused model and the standard "
    "nodes of the fused one; each fused node runs through its generated kernel on the chosen backend. "
    "Reports, per graph output and per fused node (kernel against onnxruntime on the node's original "
    "subgraph): max abs error, MERE, MARE, the threshold for its dtype, NaN/Inf position mismatches and "
    "PASS/FAIL. Exit 0 all PASS, 1 any FAIL, 2 bad input.")


def build_command_parser() -> argparse.ArgumentParser:
    """The subcommands of `lower` (`lower diff ...`). `lower MODEL` itself is build_parser(): argparse
    cannot put a positional MODEL beside subcommands on one parser, so main() hands argv to this
    parser when its first word names a subcommand, and to build_parser() otherwise."""
    root = _Parser(prog="lower", add_help=False)
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Parser)
    diff = commands.add_parser("diff", description=_DIFF_DESCRIPTION,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_diff_arguments(diff)
    return root


def _subparsers(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in root._actions if isinstance(a, argparse._SubParsersAction))


def build_diff_parser() -> argparse.ArgumentParser:
    """The parser of `lower diff` alone (its arguments after the word diff)."""
    return _subparsers(build_command_parser())["diff"]


def subcommands() -> tuple[str, ...]:
    return tuple(_subparsers(build_command_parser()))


def _run_diff(args: argparse.Namespace) -> int:
    return run_diff(args.unfused, args.fused, args)


def safe_stem(path: Path) -> str:
    stem = path.name[:-5] if path.name.lower().endswith(".onnx") else path.stem
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "model"
    return cleaned[:100]


def _given_verify_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options of add_input_options' group (read by --verify only) set on the command line;
    their defaults mean "not given"."""
    return [a.option_strings[0] for group in parser._action_groups if group.title == INPUT_OPTIONS
            for a in group._group_actions if getattr(args, a.dest) != a.default]


def _check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Option combinations that cannot work, refused before any work starts."""
    given = _given_verify_options(parser, args)
    if given and not args.verify:
        raise LoweringError(f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} with --verify")
    if args.emit == "ir":
        clash = [o for o, on in (("--verify", args.verify), ("-o", args.output is not None),
                                 ("--force", args.force)) if on]
        if clash:
            raise LoweringError(f"--emit ir prints the kernel IR and writes nothing; drop {', '.join(clash)}")
    if args.verify:
        check_options(args)


def _write_outputs(staging: Path, stem: str, loaded: LoadedModel, fused: onnx.ModelProto,
                   kernels: list[KernelArtifact], report_data: dict[str, object]) -> None:
    save(fused, staging / f"{stem}.fused.onnx", loaded.has_external_data)
    if kernels:
        emit_kernels(kernels, staging / "kernels")
    (staging / COMPLETE).write_text(json.dumps(report_data, indent=2) + "\n")


def _print_summary(report: FusionReport, kernels: list[KernelArtifact], outdir: Path, fused_name: str) -> None:
    print(report.summary(limit=SUMMARY_LIMIT))
    for k in kernels[:SUMMARY_LIMIT]:
        print(f"  kernel   {k.file_stem} {k.variant_tag} ({k.variant_label}) for {len(k.nodes)} node(s)")
    for line in more_line(len(kernels), SUMMARY_LIMIT, "kernels"):
        print(line)
    kernels_dir = outdir / "kernels"
    projects = len(operator_projects(kernels))
    written = (f" and {projects} operator project(s) with {len(kernels)} kernel variant(s) in "
               f"{printable(str(kernels_dir), 200)}") if kernels else ""
    print(f"wrote {printable(str(outdir / fused_name), 200)}, {printable(str(outdir / COMPLETE), 200)}{written}")


def run_lower(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    _check_options(parser, args)
    try:
        get_target(args.target)
    except UnknownTargetError as exc:
        raise LoweringError(str(exc)) from None
    model_path = Path(args.model)
    stem = safe_stem(model_path)
    if args.emit == "ir":
        loaded = load(model_path, background=True)
        fused, _ = fuse_loaded(loaded, recompute_shared=args.recompute_shared, by_meaning=args.by_meaning,
                               assume_finite=args.assume_finite, beside=True)
        text = format_ir(_kernels(fused, args.target))
        print(text if text else "# no fused nodes, so no kernels")
        return 0
    outdir = args.output or Path.cwd() / f"{stem}.lowered"
    command = printable(" ".join(["lower", *sys.argv[1:]]), 200)
    with OutputTransaction(outdir, force=args.force, protected=[model_path], command=command) as tx:
        loaded = load(model_path, background=True)
        tx.protected.extend(loaded.external_files)
        # --inputs and --shape against the model's inputs, and the backend, before the work
        checked = check_input_options(args, loaded.model) if args.verify else None
        fused, report = fuse_loaded(loaded, recompute_shared=args.recompute_shared, by_meaning=args.by_meaning,
                                    assume_finite=args.assume_finite, beside=True)
        kernels = _kernels(fused, args.target) if args.emit == "all" else []
        data = report.to_dict()
        data.update(model=str(model_path), target=args.target, fused_model=f"{stem}.fused.onnx",
                    kernels=[k.report() for k in kernels])
        _write_outputs(tx.staging, stem, loaded, fused, kernels, data)
        tx.commit()
    if not args.quiet:
        _print_summary(report, kernels, outdir, f"{stem}.fused.onnx")
    if args.verify:
        return run_verify(loaded.model, fused, args.target, args, checked)
    return 0


def _kernels(fused: onnx.ModelProto, target: str) -> list[KernelArtifact]:
    try:
        return build_kernels(fused, target)
    except CodegenError as exc:
        raise LoweringError(f"kernel generation failed: {exc}") from None


def _raise_terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)  # unwinds like SIGINT: partial work is removed
    try:
        if argv and argv[0] in subcommands():
            args = build_command_parser().parse_args(argv)
            return int(args.run(args))
        parser = build_parser()
        return run_lower(parser, parser.parse_args(argv))
    except ToolError as exc:
        if not exc.user_error and os.environ.get("LOWER_DEBUG"):
            raise
        if exc.user_error:
            print(f"lower: error: {printable(str(exc), 400)}", file=sys.stderr)
            return 2
        print(f"lower: internal error: {printable(str(exc), 300)} (set LOWER_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("lower: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lower ... --emit ir | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # the file system refused: a path, a permission, a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"lower: error: {printable(where + (exc.strerror or str(exc)), 400)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: one line, the traceback only on request
        if os.environ.get("LOWER_DEBUG"):
            raise
        print(f"lower: internal error: {type(exc).__name__}: "
              f"{printable(str(exc).splitlines()[0], 300) if str(exc) else ''}"
              " (set LOWER_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
