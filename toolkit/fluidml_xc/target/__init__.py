"""What a build is for and how it becomes an executable: `boards` (board and target TOML files), `machine`
(llvmlite target machines, MachineSpec, object emission), `jit` (the in-process MCJIT: setup,
engines, host_can_run), `link` (ziglang cc: runtime objects, runner, library)."""
