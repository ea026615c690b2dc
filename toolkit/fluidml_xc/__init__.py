"""fluidml-xc: cross-compile ONNX models for edge boards with FluidML's optimizations."""

__version__ = "0.1.0"
