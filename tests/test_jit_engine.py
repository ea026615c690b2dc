"""The in-process JIT's engines (target/jit.py): one freed by the garbage collector in a reference cycle (as a
failed run's exception keeps it: pytest.raises, a traceback) disposes its module's context after itself. Run in a
child process: the crash it guards against is a segmentation fault."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.jit import jit_engine
from fluidml_xc.target.machine import machine_spec

spec = machine_spec(get_board(None))
for _ in range(3):
    engine = jit_engine("define i32 @f() {\\n  ret i32 7\\n}\\n", spec)
    assert engine.get_function_address("f")
    cycle = [engine]
    cycle.append(cycle)
    del engine, cycle
gc.collect()
print("collected")
"""


def test_engines_in_a_reference_cycle_are_collected():
    toolkit = Path(__file__).resolve().parents[1] / "toolkit"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(toolkit), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "collected\n", (proc.returncode, proc.stderr[-2000:])
