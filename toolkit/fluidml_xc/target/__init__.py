"""What a build is for and how it becomes an executable: `boards` (board and target TOML files), `machine`
(llvmlite target machines, MachineSpec, object emission), `link` (ziglang cc: runtime objects, runner, library)."""
