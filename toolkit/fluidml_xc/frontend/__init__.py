"""Stage 1, ONNX -> ir.Graph: the importer and what it expands or checks at import (sequences, control flow,
ai.onnx.ml ops, bounded dynamic shapes, validation, unsupported features)."""
