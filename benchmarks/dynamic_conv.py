"""Conv and pooling with run-time extents against the same layers built static, at the same sizes (issue #26).

Each layer (MobileNetV2's shapes and a CRNN-like stack, channels-last as the optimizer lays them out) is emitted
twice for this machine and JIT-compiled: once with its batch or spatial dims as symbols over a range, once static at
each size of the table. Both run on one thread (the JIT's serial fxc_parallel_for), timed alternately (the least
time of each, benchmarks/ab_timing.py); the table gives the dynamic/static latency ratio per layer and size, their geometric mean and worst.

    PYTHONPATH=toolkit python benchmarks/dynamic_conv.py [--vary hw|n|w] [--repeat 30] [--json out.json]

With --model, a whole ONNX model instead, built once over --input-shape's ranges and once per size (--static with
the sizes as {NAME} fields); --name-dims names the dims of a model exported with fixed sizes, as an exporter with
dynamic axes writes them:

    PYTHONPATH=toolkit python benchmarks/dynamic_conv.py --model mobilenetv2.onnx --name-dims input=,,H,W \
        --input-shape input=1x3x160..224x160..224 --static input=1x3x{H}x{W} --sizes H=160,W=160 H=224,W=224
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_timing import least_times, summary  # noqa: E402
from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter, check_supported  # noqa: E402
from fluidml_xc.ir import Graph, Node, Tensor  # noqa: E402
from fluidml_xc.planning import PlanOptions, plan_memory  # noqa: E402
from fluidml_xc.symbolic import Sym, SymRange, at, capacity, evaluate, floordiv, is_static  # noqa: E402
from fluidml_xc.target.boards import get_board  # noqa: E402
from fluidml_xc.target.jit import jit_engine  # noqa: E402
from fluidml_xc.target.machine import machine_spec  # noqa: E402

NHWC = (0, 2, 3, 1)
F32 = np.dtype(np.float32)


def out_dim(size, k: int, stride: int, pad_total: int):
    return floordiv(size + pad_total - k, stride) + 1


class Layers:
    """A chain of Conv/pool nodes over dims that may be symbols, every tensor channels-last (the input too unless
    input_layout is None); `graph(dims, env)` gives the static graph at env."""

    def __init__(self, ranges: dict[str, SymRange], input_layout: tuple[int, ...] | None = NHWC):
        self.ranges, self.ops, self.input_layout = ranges, [], input_layout

    def conv(self, cin: int, cout: int, k: int, stride: int = 1, group: int = 1):
        self.ops.append(("Conv", dict(cin=cin, cout=cout, k=k, stride=stride, group=group)))
        return self

    def pool(self, op: str, k: int, stride: int):
        self.ops.append((op, dict(k=k, stride=stride)))
        return self

    def graph(self, dims, env: dict[str, int] | None) -> tuple[Graph, dict]:
        """The graph over input dims `dims` (symbolic, or evaluated at env for the static build), and the layouts."""
        ranges = {} if env is not None else self.ranges
        g = Graph("bench", {}, [], [], [], 17, symbols=dict(ranges))
        rng = np.random.default_rng(0)

        def tensor(name, shape, value=None):
            shape = tuple(shape) if env is None else tuple(evaluate(d, env) for d in shape)
            dyn = None if all(is_static(d) for d in shape) else shape
            g.tensors[name] = Tensor(name, F32 if value is None else value.dtype, capacity(shape, ranges), value, dyn)
            return name
        cur, shape, layouts = tensor("x", dims), list(dims), {}
        if self.input_layout:
            layouts[cur] = self.input_layout
        g.inputs.append(cur)
        for i, (op, a) in enumerate(self.ops):
            pad = a["k"] // 2
            n, c, h, w = shape
            oh, ow = out_dim(h, a["k"], a["stride"], 2 * pad), out_dim(w, a["k"], a["stride"], 2 * pad)
            attrs = {"kernel_shape": [a["k"]] * 2, "strides": [a["stride"]] * 2, "pads": [pad] * 4}
            if op.startswith("Global"):
                oh, ow, attrs = 1, 1, {}
            ins = [cur]
            if op == "Conv":
                attrs["group"] = a["group"]
                wv = (rng.standard_normal((a["cout"], a["cin"] // a["group"], a["k"], a["k"])) * 0.1).astype(np.float32)
                ins += [tensor(f"w{i}", wv.shape, wv), tensor(f"b{i}", (a["cout"],), np.zeros(a["cout"], np.float32))]
                c = a["cout"]
            shape = [n, c, oh, ow]
            out = tensor(f"t{i}", shape)
            g.nodes.append(Node(op, f"n{i}", ins, [out], attrs))
            layouts[out] = NHWC
            cur = out
        g.outputs.append(cur)
        return g, layouts


def compile_graph(g: Graph, layouts: dict):
    check_supported(g)
    plan = plan_memory(g, PlanOptions(reuse=False, inplace=False, reorder=False))
    spec = machine_spec(get_board(None))
    emitter = ModuleEmitter(g, plan, spec, EmitOptions(parallel=True, layouts=layouts))
    engine = jit_engine(emitter.emit(), spec)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))(
        engine.get_function_address("fxc_model_run"))
    return engine, fn, emitter.arena_bytes


def runner(g: Graph, compiled, env: dict[str, int]):
    """A function running the compiled graph once at symbol values env."""
    _, fn, arena_bytes = compiled
    x = g.tensors[g.inputs[0]]
    xin = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    out = np.zeros(g.tensors[g.outputs[0]].shape, np.float32)
    arena = np.zeros(arena_bytes + 64, np.uint8)
    base = arena.ctypes.data + (-arena.ctypes.data) % 64
    syms = (ctypes.c_int64 * max(1, len(g.symbols)))(*[env[s] for s in g.symbols])
    ins, outs = (ctypes.c_void_p * 1)(xin.ctypes.data), (ctypes.c_void_p * 1)(out.ctypes.data)
    keep = (xin, out, arena, syms, ins, outs, compiled)  # the engine too: freeing it frees the code
    return lambda: fn(ctypes.addressof(keep[4]), ctypes.addressof(keep[5]), base, keep[3])


def cases(vary: str):
    """(name, Layers, input dims, sizes to time)."""
    H, W, N = Sym("H"), Sym("W"), Sym("N")
    if vary == "n":
        r = {"N": SymRange("N", 1, 4, 1)}
        mk = lambda c, s: (N, c, s, s)  # noqa: E731
        envs = [{"N": n} for n in (1, 2, 3, 4)]
    elif vary == "w":
        r = {"W": SymRange("W", 32, 512, 128)}
        mk = lambda c, s: (1, c, s, W)  # noqa: E731
        envs = [{"W": w} for w in (40, 100, 256, 512)]
    else:
        r = {"H": SymRange("H", 40, 80, 56), "W": SymRange("W", 40, 80, 56)}
        mk = lambda c, s: (1, c, H, W)  # noqa: E731
        envs = [{"H": s, "W": s} for s in (40, 56, 63, 80)]
    if vary == "w":
        yield "crnn 3x3", Layers(r).conv(1, 32, 3).pool("MaxPool", 2, 2).conv(32, 64, 3).pool("MaxPool", 2, 2), mk(1, 32), envs
        yield "crnn 3x3 c128", Layers(r).conv(64, 128, 3).conv(128, 128, 3).pool("MaxPool", 2, 2), mk(64, 8), envs
        return
    yield "stem 3x3 s2", Layers(r).conv(3, 32, 3, 2).conv(32, 32, 1), mk(3, 80), envs
    yield "dw 3x3 s1 c96", Layers(r).conv(96, 96, 1).conv(96, 96, 3, 1, 96).conv(96, 24, 1), mk(96, 80), envs
    yield "dw 3x3 s2 c144", Layers(r).conv(144, 144, 1).conv(144, 144, 3, 2, 144).conv(144, 32, 1), mk(144, 80), envs
    yield "pw 1x1 c192", Layers(r).conv(32, 192, 1).conv(192, 32, 1), mk(32, 80), envs
    yield "pool", Layers(r).conv(16, 16, 1).pool("MaxPool", 3, 2).pool("GlobalAveragePool", 1, 1), mk(16, 80), envs


def model_build(model, flag: str):
    """(graph, compiled) of an ONNX model imported with one --input-shape (ranges or sizes), lowered for this
    machine on one thread."""
    from fluidml_xc.frontend.ranges import parse_ranges, split_input_shapes
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower

    shapes, given = split_input_shapes([flag])
    graph = import_graph(model, shapes, ranges=parse_ranges(given, [], [], []))
    spec = machine_spec(get_board(None))
    low = lower(graph, spec, LowerOptions(threads=1, parallel=False))
    engine = jit_engine(low.ir_text, spec)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))(
        engine.get_function_address("fxc_model_run"))
    return low.graph, (engine, fn, low.emitter.arena_bytes)


def model_rows(args) -> list[dict]:
    import onnx

    model = onnx.load(args.model)
    for text in args.name_dims:  # a model exported with fixed sizes: name its dims as dynamic axes would
        name, _, names = text.partition("=")
        for inp in model.graph.input:
            if inp.name == name:
                for dim, label in zip(inp.type.tensor_type.shape.dim, names.split(",")):
                    if label:
                        dim.dim_param = label
    for out in model.graph.output:
        for i, dim in enumerate(out.type.tensor_type.shape.dim):
            dim.dim_param = f"{out.name}_{i}"
    del model.graph.value_info[:]
    g_dyn, dyn = model_build(model, args.input_shape)
    print(f"dynamic arena {dyn[2]} B, symbols {list(g_dyn.symbols)}", flush=True)
    rows = []
    for text in args.sizes:
        env = {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}
        g_st, st = model_build(model, args.static.format(**env))
        t_dyn, t_st = least_times([runner(g_dyn, dyn, env), runner(g_st, st, env)], args.repeat)
        rows.append({"layer": "model", "env": env, "static_ms": t_st * 1e3, "dynamic_ms": t_dyn * 1e3, "ratio": t_dyn / t_st,
                     "static_arena": st[2], "dynamic_arena": dyn[2]})
        print(f"{text:<20} static {t_st * 1e3:8.3f} ms (arena {st[2]} B)  dynamic {t_dyn * 1e3:8.3f} ms  "
              f"ratio {t_dyn / t_st:5.3f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vary", choices=("hw", "n", "w"), default="hw", help="which dims are symbols (default hw)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--model", help="an ONNX model to time whole (with --input-shape, --static, --sizes)")
    ap.add_argument("--input-shape", help="the dynamic build's --input-shape, with ranges")
    ap.add_argument("--static", help="the static builds' --input-shape, sizes as {NAME} fields")
    ap.add_argument("--sizes", nargs="*", default=[], help="NAME=V,NAME=V per size")
    ap.add_argument("--name-dims", nargs="*", default=[], help="INPUT=,,H,W: name an input's fixed dims (empty: kept)")
    args = ap.parse_args()
    rows = model_rows(args) if args.model else []
    for name, layers, dims, envs in ([] if args.model else cases(args.vary)):
        g_dyn, lay = layers.graph(dims, None)
        dyn = compile_graph(g_dyn, lay)
        for env in envs:
            g_st, lay_st = layers.graph(dims, env)
            t_dyn, t_st = least_times([runner(g_dyn, dyn, env), runner(g_st, compile_graph(g_st, lay_st), env)], args.repeat)
            rows.append({"layer": name, "env": env, "static_ms": t_st * 1e3, "dynamic_ms": t_dyn * 1e3, "ratio": t_dyn / t_st})
            print(f"{name:<16} {str(at(dims, {**env, **{k: v.hi for k, v in layers.ranges.items() if k not in env}})):<22} "
                  f"static {t_st * 1e3:8.3f} ms  dynamic {t_dyn * 1e3:8.3f} ms  ratio {t_dyn / t_st:5.2f}", flush=True)
    print(summary([r["ratio"] for r in rows]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
