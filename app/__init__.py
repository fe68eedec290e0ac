"""The `lower` command (app.cli), the one place that joins the stages: the graph pass (lowering),
the kernel generator (codegen) and the diff (runtime, through app.diff_cli), and writes OUTDIR
(app.outdir). The Python API of each stage is its own package; nothing below imports this one."""
