"""ONNX graph pass: find and fuse SmoothL1-backward and proximal-gradient-descent subgraphs."""
