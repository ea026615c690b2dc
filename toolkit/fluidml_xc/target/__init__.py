"""What a build is for and what runs its code: `boards` (board and target TOML files), `machine` (llvmlite
target machines, MachineSpec, object emission), `jit` (the in-process MCJIT: setup, engines), `host` (host_can_run), `arch`
(per-architecture facts the kernels ask).
Linking, which needs the C API's names, is emit/link.py."""
