"""Kernel generator: fused ONNX nodes -> kernel IR -> schedule -> AscendC projects.

Public entry points are in codegen.api (build_kernels, kernel_for_node, emit_kernels, format_ir);
the IR and its numeric semantics are in codegen.ir, the target table in codegen.targets.
"""
