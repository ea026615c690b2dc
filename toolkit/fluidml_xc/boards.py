"""Old path of target/boards.py, kept until phase B of #14 (benchmarks/mca.py imports it)."""
from .target.boards import get_board  # noqa: F401
