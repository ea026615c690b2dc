"""--explain: per-node error of the quantized model against the float model over the calibration set.

Every activation the float model's nodes produce is matched with its counterpart in the quantized
model (QDQ: `T_DequantizeLinear_Output`; QOperator: `T_quantized` dequantized with `T_scale` /
`T_zero_point`; a tensor the quantizer left in float keeps its name). Both models run in ONNX Runtime
with those tensors as outputs; per tensor we accumulate the signal-to-quantization-noise ratio
the relative error sqrt(sum (q - f)^2 / sum f^2) over all samples (and SQNR = -20 log10 of it, in dB).
A node's added error is its output's relative error minus the largest of its activation inputs': the
nodes that add the most are what to `--exclude`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .data import Samples
from .progress import progress_bar

DEQ_SUFFIX = "_DequantizeLinear_Output"
QUANT_SUFFIX = "_quantized"


@dataclass(frozen=True)
class NodeError:
    node: str
    """the first node of the group (its own name, or the op the quantizer fused with the ones after it)"""
    op_type: str
    """op types of the group: "Conv+Clip" when the Conv's own output has no counterpart in the quantized model"""
    output: str
    sqnr_db: float
    """SQNR of the node's output in the quantized model (inf: exact)"""
    rel_err: float
    """sqrt(sum (q - f)^2 / sum f^2) of the output"""
    added_err: float
    """rel_err of the output minus the largest rel_err of its activation inputs (what this node adds)"""
    max_abs_err: float

    def as_dict(self) -> dict:
        def finite(v: float) -> float | None:
            return v if math.isfinite(v) else None
        return {"node": self.node, "op_type": self.op_type, "output": self.output, "sqnr_db": finite(self.sqnr_db),
                "rel_err": finite(self.rel_err), "added_err": finite(self.added_err), "max_abs_err": self.max_abs_err}


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    present = {o.name for o in out.graph.output}
    out.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names if n not in present)
    return out


def _matches(float_model: onnx.ModelProto, quant_model: onnx.ModelProto) -> dict[str, tuple[str, float | None, np.ndarray | None]]:
    """float tensor -> (quantized model tensor, scale, zero point) (scale None: the tensor is float there)."""
    produced = {o for n in quant_model.graph.node for o in n.output} | {i.name for i in quant_model.graph.input}
    inits = {i.name: i for i in quant_model.graph.initializer}
    candidates = [n.name for n in float_model.graph.input] + [o for n in float_model.graph.node for o in n.output if o]
    found = {}
    for name in candidates:
        if name + DEQ_SUFFIX in produced:
            found[name] = (name + DEQ_SUFFIX, None, None)
        elif name + QUANT_SUFFIX in produced and name + "_scale" in inits and name + "_zero_point" in inits:
            scale = numpy_helper.to_array(inits[name + "_scale"])
            zp = numpy_helper.to_array(inits[name + "_zero_point"])
            if scale.size == 1 and zp.size == 1:
                found[name] = (name + QUANT_SUFFIX, float(scale.reshape(())), zp.reshape(()))
        elif name in produced:
            found[name] = (name, None, None)
    # a Relu/Clip the quantizer folded into the op before it (its range is the quantized tensor's): that
    # quantized tensor holds the activation's output, not the op's, so it is matched with the activation's
    readers: dict[str, int] = {}
    for node in float_model.graph.node:
        for i in node.input:
            readers[i] = readers.get(i, 0) + 1
    for node in float_model.graph.node:
        if node.op_type not in ("Relu", "Clip") or not node.input or not node.output or node.input[0] not in found \
                or readers.get(node.input[0]) != 1:
            continue
        if node.output[0] not in found:
            found[node.output[0]] = found.pop(node.input[0])
        elif found[node.input[0]][1] is not None:  # QOperator: the activation's output is its dequantized copy
            found.pop(node.input[0])
    return found


def explain(float_path: Path, quant_path: Path, samples: Samples, progress: bool | None = None) -> list[NodeError]:
    """Per-node errors, largest loss first. `float_path` must be the model the quantizer read (pre-processed)."""
    float_model = onnx.load(str(float_path))
    quant_model = onnx.load(str(quant_path))
    matches = _matches(float_model, quant_model)
    float_names = list(matches)
    quant_names = [matches[n][0] for n in float_names]
    fs = _session(_with_outputs(float_model, float_names))
    qs = _session(_with_outputs(quant_model, quant_names))
    f_out = [o.name for o in fs.get_outputs()]
    q_out = [o.name for o in qs.get_outputs()]
    signal = dict.fromkeys(float_names, 0.0)
    noise = dict.fromkeys(float_names, 0.0)
    worst = dict.fromkeys(float_names, 0.0)
    bar = progress_bar(len(samples), "explain", progress)
    for feed in samples.feeds:
        bar.update(1)
        f_vals = dict(zip(f_out, fs.run(f_out, feed)))
        q_vals = dict(zip(q_out, qs.run(q_out, feed)))
        for name in float_names:
            f = np.asarray(f_vals[name])
            if f.dtype.kind != "f":
                continue
            qname, scale, zp = matches[name]
            q = np.asarray(q_vals[qname])
            q = (q.astype(np.float64) - float(zp)) * scale if scale is not None else q.astype(np.float64)
            if q.shape != f.shape:
                continue
            d = q - f.astype(np.float64)
            signal[name] += float(np.sum(np.square(f, dtype=np.float64)))
            noise[name] += float(np.sum(np.square(d)))
            worst[name] = max(worst[name], float(np.max(np.abs(d))) if d.size else 0.0)
    bar.close()

    def rel(name: str) -> float | None:
        """sqrt(sum (q - f)^2 / sum f^2): 0 exact, 1 as large as the signal."""
        if name not in signal:
            return None
        if noise[name] == 0.0:
            return 0.0
        return math.sqrt(noise[name] / signal[name]) if signal[name] > 0 else math.inf

    producer = {o: node for node in float_model.graph.node for o in node.output if o}

    def upstream(name: str, seen: set) -> tuple[list[float], list]:
        """rel errors of the nearest measured tensors feeding `name`, and the unmeasured nodes passed on the way."""
        if name in seen:
            return [], []
        seen.add(name)
        e = rel(name)
        if e is not None:
            return [e], []
        node = producer.get(name)
        if node is None:
            return [], []
        errs, chain = [], [node]
        for i in node.input:
            if i:
                more, nodes = upstream(i, seen)
                errs += more
                chain = nodes + chain
        return errs, chain

    rows = []
    for node in float_model.graph.node:
        outs = [o for o in node.output if o and rel(o) is not None]
        if not outs:
            continue
        out = outs[0]
        seen: set = set()
        ins, chain = [], []
        for i in node.input:
            if i:
                errs, nodes = upstream(i, seen)
                ins += errs
                chain += nodes
        chain = [n for n in chain if n.op_type not in ("Constant", "Identity")] + [node]
        value = rel(out)
        added = value - max(ins, default=0.0)
        sqnr = math.inf if value == 0.0 else -20.0 * math.log10(value) if math.isfinite(value) else -math.inf
        rows.append(NodeError(chain[0].name or out, "+".join(n.op_type for n in chain), out, sqnr, value, added, worst[out]))
    return sorted(rows, key=lambda r: (-r.added_err if math.isfinite(r.added_err) else -math.inf, r.node))
