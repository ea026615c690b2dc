"""Digests of the code fluidml-xc generates, to show that a restructuring changed no generated code.

Three parts, each a set of keys -> sha256, written to OUT/digest.json (with the IR text of every key under
OUT/ir/ so a difference can be read with diff):

- models: every board file x threads (1 and 4) x each model given (and the package's example models): the LLVM
  IR of every code variant's units and entry module, their constants and the memory plan's facts. Never run.
- data-dependent: the ONNX node cases whose ops have data-dependent output shapes (OpSpec.output_bound), on the
  same boards and thread counts.
- conformance: every ONNX node case imported at its first data set's shapes and lowered for the architectures
  given (--arches), compile only: the IR, or the error's type and message. With --status, the host's
  conformance result per case too (`python -m fluidml_xc.conformance --json` of the same tree).

    python benchmarks/codegen_digest.py --out /tmp/before --models m1.onnx m2.int8.onnx
    (change the code)
    python benchmarks/codegen_digest.py --out /tmp/after --models m1.onnx m2.int8.onnx --compare /tmp/before

Run it with PYTHONPATH=<checkout>/toolkit to digest that checkout's compiler.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import onnx

THREADS = (1, 4)
CONFORMANCE_BOARDS = {"x86_64": "x86_64-v3", "aarch64": "qemu-aarch64", "armv7": "qemu-armv7"}


def _failure(exc: Exception) -> str:
    """An error as a result: the exit code users see (a fluidml-xc error) or the exception's type, and the message."""
    code = getattr(exc, "exit_code", None)
    return f"error {f'exit {code}' if code is not None else type(exc).__name__}: {exc}"


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _lowered_text(graph, board, threads: int) -> str:
    """Every variant's units (IR text in step order, then its entry module), the digest of the unit constants'
    bytes and the plan's facts of GRAPH built for BOARD (as `build` emits them: emit/unit_build.py)."""
    from fluidml_xc.emit.threads import resolve_threads
    from fluidml_xc.emit.unit_build import UnitOptions, unit_texts
    from fluidml_xc.pipeline import LowerOptions, plan
    from fluidml_xc.target.machine import machine_specs

    specs = machine_specs(board)
    n = resolve_threads(board, threads)
    planned = plan(graph, specs[0], LowerOptions(threads=n, parallel=n > 1))
    texts, constants = unit_texts(planned.graph, planned.plan, specs,
                                  UnitOptions(planned.decisions.layouts, planned.decisions.loop_orders, n > 1, "fxc_"))
    facts = json.dumps(planned.plan.manifest_facts(), sort_keys=True, default=str)
    blob = _sha(constants)
    return "\n".join([f"; plan {facts}", f"; blob {blob}", *texts])


def _model_job(job: tuple[str, str, str, int]) -> tuple[str, str]:
    key, source, board_name, threads = job
    from fluidml_xc.pipeline import import_graph
    from fluidml_xc.target.boards import get_board

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            model = _load(source)
            graph = import_graph(model, _shapes(source, model))
            text = _lowered_text(graph, get_board(board_name), threads)
    except Exception as exc:  # noqa: BLE001 - an error is a result to compare too
        text = _failure(exc)
    return key, text


def _load(source: str) -> onnx.ModelProto:
    if source.startswith("example:"):
        from fluidml_xc.examples import EXAMPLES
        return EXAMPLES[source.split(":", 1)[1]]()
    if source.startswith("case:"):
        from fluidml_xc.conformance.cases import get_case
        return get_case(source.split(":", 1)[1]).model
    return onnx.load(source)


def _shapes(source: str, model: onnx.ModelProto) -> dict | None:
    if not source.startswith("case:"):
        return None
    from fluidml_xc.conformance.cases import get_case
    from fluidml_xc.conformance.runner import _normalize

    data = get_case(source.split(":", 1)[1]).data_sets[0][0]
    return {vi.name: tuple(np.shape(_normalize(x))) for vi, x in zip(model.graph.input, data)}


def _conformance_job(job: tuple[str, str, str]) -> tuple[str, str]:
    key, case, board_name = job
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            model = _load(f"case:{case}")
            graph = import_graph(model, _shapes(f"case:{case}", model))
            text = lower(graph, machine_spec(get_board(board_name)), LowerOptions()).ir_text
    except Exception as exc:  # noqa: BLE001
        text = _failure(exc)
    return key, text


def _data_dependent_cases() -> list[str]:
    from fluidml_xc.conformance.cases import case_ops
    from fluidml_xc.opspec import all_specs

    ops = {op for (_, op), specs in all_specs().items() if any(s.output_bound for s in specs)}
    return [name for name, op in case_ops().items() if op in ops]


def _jobs(args) -> tuple[list, list, list[str]]:
    from fluidml_xc.examples import EXAMPLES
    from fluidml_xc.target.boards import boards

    sources = {Path(m).name: str(Path(m).resolve()) for m in args.models}
    sources.update({f"example-{name}": f"example:{name}" for name in EXAMPLES})
    cases = (Path(args.dd_cases).read_text().split() if args.dd_cases else _data_dependent_cases())
    sources.update({f"case-{c}": f"case:{c}" for c in cases})
    board_names = args.boards or sorted(boards())
    model_jobs = [(f"{name}@{b}@t{t}", src, b, t) for name, src in sources.items() for b in board_names for t in THREADS]
    conf_jobs = []
    if args.conformance:
        from fluidml_xc.conformance.cases import load_cases
        conf_jobs = [(f"conformance/{case}@{arch}", case, CONFORMANCE_BOARDS[arch])
                     for arch in args.arches for case in load_cases()]
    return model_jobs, conf_jobs, cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for digest.json and ir/")
    parser.add_argument("--models", nargs="*", default=[], help="ONNX files (float and quantized)")
    parser.add_argument("--boards", nargs="*", help="board names (default: every board)")
    parser.add_argument("--conformance", action="store_true", help="also every ONNX node case, compile only")
    parser.add_argument("--arches", nargs="*", default=list(CONFORMANCE_BOARDS), choices=list(CONFORMANCE_BOARDS))
    parser.add_argument("--dd-cases", help="file of the data-dependent case names to use (default: from OpSpec)")
    parser.add_argument("--status", help="a conformance --json result file of this tree, digested per case")
    parser.add_argument("--compare", help="an earlier --out directory: print the keys that differ")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    out = Path(args.out)
    (out / "ir").mkdir(parents=True, exist_ok=True)
    model_jobs, conf_jobs, cases = _jobs(args)
    (out / "dd_cases.txt").write_text("\n".join(cases) + "\n")
    digest: dict[str, str] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for fn, jobs in ((_model_job, model_jobs), (_conformance_job, conf_jobs)):
            for done, (key, text) in enumerate(pool.map(fn, jobs, chunksize=4), 1):
                digest[key] = _sha(text)
                (out / "ir" / (key.replace("/", "__") + ".ll")).write_text(text)
                if done % 200 == 0:
                    print(f"{done}/{len(jobs)}", file=sys.stderr, flush=True)
    if args.status:
        rows = json.loads(Path(args.status).read_text())
        for row in rows.get("results", []) if isinstance(rows, dict) else rows:
            digest[f"status/{row['name']}"] = _sha(f"{row.get('status')} {row.get('kind')}")
    (out / "digest.json").write_text(json.dumps(digest, indent=0, sort_keys=True))
    errors = sum(1 for k in digest if (path := out / "ir" / (k.replace("/", "__") + ".ll")).exists()
                 and path.read_text().startswith("error "))
    print(f"{len(digest)} digests ({errors} of them errors) in {out / 'digest.json'}")
    if args.compare:
        before = json.loads((Path(args.compare) / "digest.json").read_text())
        differ = sorted(k for k in set(before) & set(digest) if before[k] != digest[k])
        missing, extra = sorted(set(before) - set(digest)), sorted(set(digest) - set(before))
        for k in differ[:50]:
            print(f"DIFFERS {k}: diff {Path(args.compare) / 'ir' / (k.replace('/', '__') + '.ll')} "
                  f"{out / 'ir' / (k.replace('/', '__') + '.ll')}")
        print(f"compared {len(set(before) & set(digest))}: {len(differ)} differ, {len(missing)} only before, "
              f"{len(extra)} only now")
        return 1 if differ or missing or extra else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
