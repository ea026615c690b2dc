"""`fluidml-xc quantize MODEL.onnx --calibration DATA -o MODEL.int8.onnx`: int8 with ONNX Runtime's quantizer, checked on a board."""
from __future__ import annotations

import json
from pathlib import Path

from ..pipeline import OPT_MODES

NAME = "quantize"
HELP = "post-training int8 quantization (onnxruntime.quantization), then float and int8 builds compared: accuracy, latency, memory"
ORDER = 15


def add_arguments(parser) -> None:
    from ..frontend.binding import HELP as BIND_HELP
    from ..frontend.input_shapes import HELP as SHAPE_HELP
    from ..quantize import FORMATS, METHODS, QTYPES

    parser.add_argument("model", type=Path, help="the float .onnx model")
    parser.add_argument("--calibration", "-c", type=Path, required=True, metavar="DATA",
                        help="a directory of .npz feeds (one per sample, keys = input names) or one .npz with a leading sample axis")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="MODEL.int8.onnx", help="where to write the int8 model")
    parser.add_argument("--force", action="store_true", help="overwrite an existing -o file")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224",
                        help=SHAPE_HELP + "; the samples must have these shapes (default: the samples' shapes)")
    parser.add_argument("--bind", action="append", default=[], metavar="NAME=VALUE",
                        help=BIND_HELP + "; the int8 model keeps the value and drops the input, the samples may leave it out")
    parser.add_argument("--format", choices=FORMATS, default="qdq", help="QDQ (Quantize/DequantizeLinear pairs, the default) or QOperator (QLinearConv, ...)")
    parser.add_argument("--method", choices=METHODS, default="minmax", help="calibration method (default minmax)")
    parser.add_argument("--per-channel", action="store_true", help="per-channel weight scales")
    parser.add_argument("--activation-type", choices=QTYPES, help="default: int8 for qdq, uint8 for qoperator")
    parser.add_argument("--weight-type", choices=QTYPES, default="int8")
    parser.add_argument("--reduce-range", action="store_true",
                        help="7-bit weights (within +-64): on x86 CPUs without VNNI the int8 kernels then run exact "
                             "vpmaddubsw pair sums (faster; ONNX Runtime's no longer saturate either)")
    parser.add_argument("--exclude", action="append", default=[], metavar="NODE_OR_TYPE",
                        help="a node name or op type to leave in float (repeatable)")
    parser.add_argument("--dynamic", action="store_true",
                        help="dynamic quantization (quantize_dynamic): int8 weights, activations quantized at run time; the samples only evaluate")
    parser.add_argument("--eval", type=Path, metavar="DATA", help="held-out samples for the report (default: part of --calibration)")
    parser.add_argument("--board", "-b", help="board to build and run both models for (default: this machine; foreign boards under qemu)")
    parser.add_argument("--build-dir", type=Path, default=Path("build"), metavar="DIR", help="where the two artifacts go (default build/)")
    parser.add_argument("--opt", choices=OPT_MODES, default="fluid")
    parser.add_argument("--no-build", action="store_true", help="only quantize and compare under ONNX Runtime")
    parser.add_argument("--threads", type=int, default=1, metavar="N", help="threads of both builds and of ONNX Runtime (default 1)")
    parser.add_argument("--runs", type=int, default=50, metavar="N", help="timed runs per model and round (default 50)")
    parser.add_argument("--rounds", type=int, default=3, metavar="R",
                        help="interleaved timing rounds, float and int8 alternating (default 3); latency = median of the rounds")
    parser.add_argument("--warmup", type=int, default=5, metavar="W")
    parser.add_argument("--explain", type=int, nargs="?", const=15, default=0, metavar="N",
                        help="list the N nodes (default 15) that add the most error against the float model")
    from .output import add_json_arguments

    add_json_arguments(parser)


def main(args) -> int:
    from ..frontend.binding import parse_binds
    from ..frontend.input_shapes import parse_input_shapes
    from ..quantize import QuantConfig, QuantizeOptions, run_quantize
    from ..results import emit
    from .paths import check_model_argument

    check_model_argument(args.model, NAME)

    config = QuantConfig(format=args.format, method=args.method, per_channel=args.per_channel, dynamic=args.dynamic,
                         activation_type=args.activation_type, weight_type=args.weight_type, exclude=tuple(args.exclude),
                         reduce_range=args.reduce_range)
    report = run_quantize(QuantizeOptions(model=args.model, calibration=args.calibration, output=args.output, config=config,
                                          eval=args.eval, board=args.board, build=not args.no_build, build_dir=args.build_dir,
                                          runs=args.runs, rounds=args.rounds, warmup=args.warmup, explain=args.explain,
                                          force=args.force, opt=args.opt, bind=parse_binds(args.bind),
                                          input_shapes=parse_input_shapes(args.input_shape),
                                          threads=args.threads))
    emit(json.loads(report.json()), args.json, args.json_out, report.table)
    return 0
