"""The quantize report as text: accuracy per output, latency and memory of both builds, per-node errors."""
from __future__ import annotations

import math


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _bytes(n: int) -> str:
    return f"{n / 1048576:.2f} MiB" if n >= 1048576 else f"{n / 1024:.1f} KiB"


def _accuracy_rows(title: str, rows) -> list[str]:
    lines = [title, f"  {'output':<28} {'shape':<16} {'max abs err':>12} {'mean abs err':>13} {'cosine':>9} {'top-1':>7} {'top-5':>7}"]
    for a in rows:
        shape = "x".join(map(str, a.shape))
        lines.append(f"  {a.name[-28:]:<28} {shape:<16} {a.max_abs_err:>12.4g} {a.mean_abs_err:>13.4g} {a.cosine:>9.5f} "
                     f"{_pct(a.top1):>7} {_pct(a.top5):>7}")
    return lines


def render(report) -> str:
    cfg = report.config
    mode = "dynamic (weights int8, activations quantized at run time)" if cfg["dynamic"] else \
        f"static {cfg['format']}, {cfg['method']} calibration, {'per-channel' if cfg['per_channel'] else 'per-tensor'} weights"
    if cfg.get("reduce_range"):
        mode += ", 7-bit weights (--reduce-range)"
    lines = [f"quantized {report.model} -> {report.output}: {mode}",
             (f"evaluation: {report.eval_samples} samples ({report.eval_from})" if cfg["dynamic"] else
              f"calibration: {report.calibration_samples} samples; evaluation: {report.eval_samples} samples ({report.eval_from})")]
    if cfg["exclude"]:
        lines.append(f"left in float: {', '.join(cfg['exclude'])}")
    if report.accuracy:
        lines += ["", *_accuracy_rows(f"accuracy on {report.board}: int8 build against float build", report.accuracy)]
    lines += ["", *_accuracy_rows("ONNX Runtime on the same models: int8 against float", report.ort_accuracy)]
    if report.vs_ort_int8:
        lines.append("  int8 build vs ONNX Runtime on the int8 model, max abs difference per output:")
        for name, value in report.vs_ort_int8.items():
            lines.append(f"    {name[-28:]:<28} {value:.4g} against ORT; {report.vs_ort_int8_unfused[name]:.4g} against ORT without graph "
                         f"optimizations (the model's arithmetic as written), from which ORT's fused kernels differ by "
                         f"{report.ort_fused_vs_unfused[name]:.4g}")
    f, q = report.float_figures, report.int8_figures
    if f and q:
        where = "under qemu-user: correctness only, these times are not board times" if report.emulated else \
            f"this machine, {report.threads} thread{'s' if report.threads > 1 else ''}"
        lines += ["", f"latency and memory on {report.board} ({where}):",
                  f"  {'':<6} {'median ms':>10} {'ORT ms':>9} {'arena':>11} {'weights':>11} {'runner RSS':>11}"]
        for name, fig in (("float", f), ("int8", q)):
            ort = "-" if fig.ort_median_ms is None else f"{fig.ort_median_ms:.3f}"
            lines.append(f"  {name:<6} {fig.median_ms:>10.3f} {ort:>9} {_bytes(fig.arena_bytes):>11} {_bytes(fig.weights_bytes):>11} "
                         f"{_bytes(fig.peak_rss_bytes):>11}")
        ratio = f"  int8/float latency: {q.median_ms / f.median_ms:.2f}x"
        if f.ort_median_ms and q.ort_median_ms:
            ratio += f" (ONNX Runtime: {q.ort_median_ms / f.ort_median_ms:.2f}x); int8 build / ORT int8: {q.median_ms / q.ort_median_ms:.2f}x"
        lines.append(ratio)
        lines.append(f"  artifacts: {f.artifact}, {q.artifact}")
    if report.explain:
        lines += ["", "per-node error against the float model over the calibration samples (largest added error first):",
                  f"  {'node':<44} {'op':<16} {'rel err':>9} {'added':>9} {'SQNR dB':>8}"]
        for e in report.explain:
            sqnr = "inf" if math.isinf(e.sqnr_db) else f"{e.sqnr_db:.1f}"
            lines.append(f"  {e.node[-44:]:<44} {e.op_type:<16} {e.rel_err:>9.4f} {e.added_err:>+9.4f} {sqnr:>8}")
        lines.append("  leave the worst in float with --exclude NODE (or --exclude OPTYPE)")
    return "\n".join(lines)
