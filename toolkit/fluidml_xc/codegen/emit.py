"""Old path of emit/emitter.py, kept until phase B of #14 (fluid/costs.py imports it)."""
from ..emit.emitter import EmitOptions, ModuleEmitter  # noqa: F401
