"""`lower`: fuse a model, write the fused model, the report and the AscendC kernels; diff graphs.

Exit codes: 0 success, 1 a verification FAILed, 2 bad input (one line on stderr), 3 internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from codegen.api import build_kernels, emit_kernels, format_ir
from codegen.errors import CodegenError
from codegen.targets import UnknownTargetError, get_target, known_targets
from runtime.diff_cli import add_input_options, run_diff, run_verify

from .api import fuse_loaded
from .errors import LoweringError
from .loading import load, save
from .report import more_line

MARKER = ".lower-output"  # marks a directory `lower` wrote, which it may overwrite on a re-run
SUMMARY_LIMIT = 20  # fusions, near misses and kernels listed on the terminal, each

DESCRIPTION = """\
Find SmoothL1-loss-backward and proximal-gradient-descent subgraphs in an ONNX model, fuse each
into one custom node (domain com.huawei.ascend: SmoothL1LossGradV2, ApplyProximalGradientDescent),
and generate an AscendC custom-operator project per fused kernel. Calls of model-local functions
that could hold a pattern are inlined to look inside them; those whose nodes fused stay inlined.

Writes into OUTDIR (default: <model stem>.lowered in the current directory):
  <stem>.fused.onnx   the fused model; every fused node carries an ONNX function with the original
                      subgraph, so onnxruntime still runs it
  report.json         fusions (pattern, node, op type, replaced nodes, attributes), near-matches
                      that were not fused and why, and the generated kernels
  kernels/<name>/     one AscendC project per distinct kernel (op_host, op_kernel, build files)
The input model is never modified. OUTDIR must be empty, new, or an earlier output of lower.

Also: `lower diff UNFUSED FUSED [options]` compares a fused model with the unfused one
(run `lower diff --help`)."""


def _targets() -> tuple[str, ...]:
    return known_targets()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise LoweringError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lower", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="path to an .onnx model (external data is read from its folder)")
    parser.add_argument("--target", required=True, metavar="T",
                        help=f"Ascend SoC to generate kernels for: {', '.join(_targets())}")
    parser.add_argument("-o", "--output", metavar="OUTDIR", type=Path,
                        help="output directory (default: ./<model stem>.lowered)")
    parser.add_argument("--emit", choices=("all", "onnx", "ir"), default="all",
                        help="all: fused model, report and kernels (default); onnx: fused model and "
                             "report only; ir: print the kernel IR of every kernel, write nothing")
    parser.add_argument("--force", action="store_true",
                        help="write into OUTDIR even if it holds files lower did not write")
    parser.add_argument("--verify", action="store_true",
                        help="after lowering, run the fused model (fused nodes through their kernels) "
                             "against the original under onnxruntime and check the CANN precision standard; "
                             "exit 1 on any FAIL")
    parser.add_argument("--recompute-shared", action="store_true",
                        help="fuse a match whose intermediates other nodes also read (an optimizer merged a "
                             "forward loss's |x| with its gradient's), keeping the matched nodes that compute "
                             "them for those readers; by default such a match is refused")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    add_input_options(parser)
    return parser


def build_diff_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lower diff", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare a fused model with its unfused original. onnxruntime runs the unfused model "
                    "and the standard nodes of the fused one; each fused node runs through its generated "
                    "kernel on the chosen backend. Reports, per graph output and per fused node (kernel "
                    "against onnxruntime on the node's original subgraph): max abs error, MERE, MARE, "
                    "the threshold for its dtype, NaN/Inf position mismatches and PASS/FAIL. "
                    "Exit 0 all PASS, 1 any FAIL, 2 bad input.")
    parser.add_argument("unfused", help="the original model")
    parser.add_argument("fused", help="the fused model (e.g. OUTDIR/<stem>.fused.onnx from lower)")
    parser.add_argument("--target", metavar="T", help=f"target whose schedule the kernels run with: {', '.join(_targets())}")
    add_input_options(parser)
    return parser


def safe_stem(path: Path) -> str:
    stem = path.name[:-5] if path.name.lower().endswith(".onnx") else path.stem
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "model"
    return cleaned[:100]


def _prepare_outdir(outdir: Path, model_path: Path, force: bool) -> None:
    if outdir.exists() and not outdir.is_dir():
        raise LoweringError(f"{outdir}: exists and is not a directory")
    if outdir.is_dir() and any(outdir.iterdir()) and not (outdir / MARKER).exists() and not force:
        raise LoweringError(f"{outdir}: not empty and not written by lower; pick another -o or pass --force")
    if outdir.resolve() == model_path.resolve().parent and not force and not (outdir / MARKER).exists():
        raise LoweringError(f"{outdir}: is the model's own folder; pick another -o or pass --force")
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / MARKER).write_text("written by `lower`; it may overwrite its own files here\n")


def _write_text(path: Path, text: str) -> None:
    """Atomic write, so an interrupted run never leaves half a file where a good one was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def run_lower(args: argparse.Namespace) -> int:

    try:
        get_target(args.target)
    except UnknownTargetError as exc:
        raise LoweringError(str(exc)) from None
    model_path = Path(args.model)
    loaded = load(model_path, background=True)
    fused, report = fuse_loaded(loaded, recompute_shared=args.recompute_shared)
    try:
        kernels = build_kernels(fused, args.target) if args.emit != "onnx" else []
    except CodegenError as exc:
        raise LoweringError(f"kernel generation failed: {exc}") from None
    if args.emit == "ir":
        text = format_ir(kernels)
        print(text if text else "# no fused nodes, so no kernels")
        return 0
    outdir = args.output or Path.cwd() / f"{safe_stem(model_path)}.lowered"
    fused_path = outdir / f"{safe_stem(model_path)}.fused.onnx"
    if fused_path.resolve() == model_path.resolve():
        raise LoweringError(f"{fused_path}: would overwrite the input model")
    _prepare_outdir(outdir, model_path, args.force)
    save(fused, fused_path, loaded.has_external_data)
    kernels_dir = outdir / "kernels"
    if kernels_dir.exists():
        shutil.rmtree(kernels_dir)  # ours (the marker says so): stale kernels must not linger
    if kernels:
        emit_kernels(kernels, kernels_dir)
    data = report.to_dict()
    data.update(model=str(model_path), target=args.target, fused_model=fused_path.name,
                kernels=[k.report() for k in kernels])
    _write_text(outdir / "report.json", json.dumps(data, indent=2) + "\n")
    if not args.quiet:
        print(report.summary(limit=SUMMARY_LIMIT))
        for k in kernels[:SUMMARY_LIMIT]:
            print(f"  kernel   {k.file_stem} ({k.kernel.op_type}, {k.kernel.dtype}) for {len(k.nodes)} node(s)")
        for line in more_line(len(kernels), SUMMARY_LIMIT, "kernels"):
            print(line)
        written = f" and {len(kernels)} kernel project(s) in {kernels_dir}" if kernels else ""
        print(f"wrote {fused_path}, {outdir / 'report.json'}{written}")
    if args.verify:
        return run_verify(loaded.model, fused, args.target, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "diff":
            args = build_diff_parser().parse_args(argv[1:])
            return run_diff(args.unfused, args.fused, args)
        args = build_parser().parse_args(argv)
        return run_lower(args)
    except LoweringError as exc:
        print(f"lower: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lower: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lower ... --emit ir | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # a bug of ours: one line, the traceback only on request
        if os.environ.get("LOWER_DEBUG"):
            raise
        print(f"lower: internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
              " (set LOWER_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
