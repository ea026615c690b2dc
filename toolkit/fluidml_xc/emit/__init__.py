"""From a planned graph to what is compiled: `emitter` (one LLVM module: a function per node, the entry
points), `capi` (the per-model C glue and header from templates/, the C API names), `threads` (thread counts),
`measure` (one node's kernel JIT-compiled and timed: the cost model's KernelTimer)."""
