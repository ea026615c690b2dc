"""Stage 10, running what was built: an artifact here or under qemu-user (execute), the ONNX backend (backend:
JIT on this host, artifacts elsewhere), build-time input values (binding)."""
