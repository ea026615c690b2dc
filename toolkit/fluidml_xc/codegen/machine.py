"""Old path of target/machine.py, kept until phase B of #14 (fluid/costs.py, benchmarks/mca.py import it)."""
from ..target.machine import compile_module, machine_spec, new_target_machine, optimized_module  # noqa: F401
