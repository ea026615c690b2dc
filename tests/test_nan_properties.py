"""Issue 24: NaN, +-Inf, -0.0, denormals and huge values through every op family, from every source a model can
hold them in (graph input, weight, attribute, constant folded at build time, fused chain), compared under the rule
of docs/GUARANTEES.md ("NaN, infinities, signed zeros and denormals") with onnx.reference, ONNX Runtime reported
beside it. Each (family, source) is one model of random cases (shapes and attributes random within the schema),
JIT-compiled once; every (family, source) once more in one model per ARM board, under qemu. Default: a fixed seed, NAN_CASES cases per model; a longer run:
`pytest tests/test_nan_properties.py --nan-cases 200 [--nan-seed S] -s` (ONNX Runtime's departures are printed)."""
from __future__ import annotations

import numpy as np
import pytest

from fluidml_xc.run.backend import compile_model
from nancases import disagreement, onnxruntime, reference
from nanfamilies import FAMILIES, family_model, mixed_model

NAN_CASES = 6
SEED = 27  # every (family, source) of this seed's default run has a NaN or an infinity in its reference outputs
PAIRS = [(family, source) for family, (_, sources) in FAMILIES.items() for source in sources]


def _option(request, name: str, default: int) -> int:
    given = request.config.getoption(name)
    return int(given) if given else default


@pytest.mark.parametrize("family,source", PAIRS, ids=[f"{f}-{s}" for f, s in PAIRS])
def test_nonfinite_values_follow_the_rule(request, family, source):
    cases, seed = _option(request, "--nan-cases", NAN_CASES), _option(request, "--nan-seed", SEED)
    failures, ort_departures, nonfinite = [], [], 0
    for start in range(0, cases, 24):  # at most 24 cases per compiled model
        model, feeds, checks = family_model(family, source, seed + start, min(24, cases - start))
        want, ort = reference(model, feeds), onnxruntime(model, feeds)
        got = compile_model(model)(feeds)
        ops = {o: n.op_type for n in model.graph.node for o in n.output}
        nonfinite += sum(_has_nonfinite(w) for w in want)
        for i, (name, check) in enumerate(checks.items()):
            if check.oracle == "ort":
                assert ort is not None, f"{name}: ONNX Runtime refused the model, the oracle of {ops[name]}"
                oracle = ort[i]
            else:
                oracle = want[i]
            why = disagreement(got[i], oracle, check)
            if why:
                failures.append(f"seed {seed + start} {name} ({ops[name]}): {why}")
            if ort is not None and check.oracle != "ort" and disagreement(ort[i], oracle, check):
                ort_departures.append(f"{name} ({ops[name]})")
    if ort_departures:
        print(f"\n{family}/{source}: ONNX Runtime departs from the rule in {len(ort_departures)} outputs: "
              + ", ".join(ort_departures[:8]))
    assert not failures, "\n".join(failures[:12])
    if (cases, seed) == (NAN_CASES, SEED):
        assert nonfinite, f"{family}/{source}: no NaN or infinity reached the reference outputs: the cell tests finite values only"
    elif not nonfinite:
        print(f"\n{family}/{source}: no NaN or infinity reached the reference outputs with seed {seed}")


def _has_nonfinite(value) -> bool:
    value = np.asarray(value)
    return bool(np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)))


@pytest.mark.parametrize("board", ["rpi4", "rpi3"])
def test_nonfinite_values_on_arm_boards(board, tmp_path):
    """Every (family, source) once, built for aarch64 and armv7 and run under qemu: NaN and infinities exactly as on
    x86_64; finite values within the tolerance, which armv7's flushed denormals stay inside."""
    from modelrun import build, require_emulator, run
    require_emulator(board)
    model, feeds, checks = mixed_model(SEED, 1)
    want, ort = reference(model, feeds), onnxruntime(model, feeds)
    got = run(build(model, tmp_path, board, profile_runner=False), feeds)
    failures = []
    for i, (name, check) in enumerate(checks.items()):
        assert check.oracle != "ort" or ort is not None, f"{name}: ONNX Runtime refused the model, the oracle here"
        oracle = ort[i] if check.oracle == "ort" else want[i]
        why = disagreement(got[name], oracle, check)
        if why:
            failures.append(f"{name}: {why}")
    assert not failures, "\n".join(failures[:12])
