"""ONNX backend node tests (onnx.backend.test.loader.load_model_tests(kind="node")) and ONNX's public model
suites shipped in the onnx package (pytorch-converted, pytorch-operator, simple) against fluidml-xc.

Each case is compiled with fluidml-xc (fluidml_xc.run.backend: in-process JIT on x86_64 hosts, a linked
runner under qemu-user for aarch64/armv7), run on every data set it carries, and compared with the
case's own expected outputs and rtol/atol exactly as onnx.backend.test.runner does. The expected
outputs are the oracle.

Cases run in worker processes (one case at a time each, several workers in parallel): a compiler
exception becomes a classified result, a crash of generated code (signal) or a case that exceeds its
time limit kills only that worker, which is restarted for the next case.

Modules: `cases` (the node cases, any case by name, and the op each tests), `suites` (the model suites'
case directories), `runner` (one case: compile, run, compare, classify; diagnose), `pool` (the isolated
workers), `expectations` (the known failures, TOML), `docs` (results files, summary, docs/SUPPORTED_OPS.md,
docs/conformance/PUBLIC_SUITES.md), `__main__` (the command line).

    python -m fluidml_xc.conformance                      # all cases on this host, summary
    python -m fluidml_xc.conformance --board qemu-aarch64 --first-per-op
    python -m fluidml_xc.conformance --write-docs         # also rewrite docs/SUPPORTED_OPS.md
    python -m fluidml_xc.conformance --suite public --board qemu-armv7   # the three model suites
"""
