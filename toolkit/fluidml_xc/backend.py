"""Phase B: benchmarks/mca.py (edited by another helper now) imports these from here; they live in pipeline.py and
run/backend.py."""
from .pipeline import import_graph  # noqa: F401
from .run.backend import compile_model  # noqa: F401
