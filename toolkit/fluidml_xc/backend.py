"""Phase B: benchmarks/mca.py (edited by another helper now) imports import_graph from here; it lives in pipeline.py."""
from .pipeline import import_graph  # noqa: F401
