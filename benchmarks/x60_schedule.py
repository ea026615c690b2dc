"""A list scheduler for hand-written RVV loops of the SpacemiT X60 (benchmarks/x60_depthwise.py's LMUL-1 depthwise
rows): the loop's ops with value names (`build`, `pointer_ops`), a greedy order over a model of llvm-mca's in-order
issue (`schedule`, `simulate`: dual issue, the units' occupancy, latencies, write-backs in program order), a local
search over it (`refine`), vector registers per in-place chain with the loop-carried ones pinned (`allocate`) and
the assembly (`emit`) that `mca` prices with llvm-mca-22."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

LAT = {"vfmul.vv": 4, "vfadd.vv": 4, "vmax.vx": 4, "vmin.vx": 4, "addi": 1, "vluxei32.v": 4, "vsuxei32.v": 4, "vfmacc.vv": 5, "vfmadd.vv": 5, "vfmax.vf": 4, "vfmin.vf": 4, "vle32.v": 3, "vse32.v": 3,
       "vadd.vv": 4, "vmsltu.vx": 4, "add": 1, "bne": 1}


UNIT = {"vfmul.vv": ("VFP", 1), "vfadd.vv": ("VFP", 1), "vmax.vx": ("VIEU", 1), "vmin.vx": ("VIEU", 1),
        "addi": ("ALU", 1), "vluxei32.v": ("VLS", 4), "vsuxei32.v": ("VLS", 4), "vfmacc.vv": ("VFP", 1), "vfmadd.vv": ("VFP", 1), "vfmax.vf": ("VFP", 1), "vfmin.vf": ("VFP", 1),
        "vle32.v": ("VLS", 3), "vse32.v": ("VLS", 3), "vadd.vv": ("VIEU", 2), "vmsltu.vx": ("VIEU", 2),
        "add": ("ALU", 1), "bne": ("IEUA", 1)}


@dataclass
class Op:
    mn: str
    dst: str | None          # value defined (vector value name, or pointer name for add)
    srcs: list               # values read
    fmt: str                 # format with {name} placeholders
    kill: str | None = None  # in-place: the value this op redefines (dst replaces it)
    col: int = 0             # the output column whose pointers it uses
    prio: float = 0.0
    deps: list = field(default_factory=list)


def index_register(row: int) -> str:
    """Indexed form: the byte offsets of input row `row` (and output row `row`) from the column's pointer."""
    return f"v{11 + row}"


def build(R: int, U: int, m: int, indexed: bool = False, int_clip: bool = False):
    """Ops of U columns x R output rows; m pointer copies per row (m == U: one add per load/store per iteration).
    indexed: one input and one output pointer per column, every row's vector at its offsets (`vluxei32.v` /
    `vsuxei32.v` with a register of byte offsets per row; output rows as long as input rows: stride 1, padded).
    int_clip: the first tap a `vfmul`, the bias a `vfadd` after the last, the Clip to [0, 6] on the bits
    (`vmax.vx` with zero, a masked `vmin.vx` with 6.0's bits in a7), the carried accumulators without the bias."""
    ops: list[Op] = []
    # carried-in: A2[o] (output -2, kw 0..1 done), A1[o] (output -1, kw 0 done)
    carried_in = {}
    acc = {}
    for o in range(R):
        acc[(o, -2)] = f"in2_{o}"; acc[(o, -1)] = f"in1_{o}"
        carried_in[f"in2_{o}"] = ("P2", o); carried_in[f"in1_{o}"] = ("P1", o)
    for j in range(U):
        for i in range(R + 2):
            x = f"x{j}_{i}"
            if indexed:
                ops.append(Op("vluxei32.v", x, [f"pi_{j % m}"], f"vluxei32.v {{d}}, ({{s0}}), {index_register(i)}", col=j))
            else:
                ops.append(Op("vle32.v", x, [f"pi{i}_{j % m}"], "vle32.v {d}, ({s0})", col=j))
            taps = []
            for o in range(R):
                kh = i - o
                if not 0 <= kh <= 2:
                    continue
                for kw, col in ((2, j - 2), (1, j - 1), (0, j)):
                    taps.append((o, kh, kw, col))
            # order: kw 2, kw 1, kw 0 (the in-place new accumulator last)
            newacc = None
            for (o, kh, kw, col) in taps:
                if kw == 0 and kh == 0:
                    newacc = (o, col)
                    continue
                if kw == 0 and (o, col) not in acc:
                    raise RuntimeError
                a = acc[(o, col)]
                na = f"a{o}_{col}_{kh}{kw}"
                ops.append(Op("vfmacc.vv", na, [a, f"w{kh}{kw}", x], "vfmacc.vv {d}, {s1}, {s2}", kill=a))
                acc[(o, col)] = na
                if kw == 2 and kh == 2:
                    # output (o, col) complete: Clip and store
                    c = na
                    if int_clip:
                        c = f"b{o}_{col}"
                        ops.append(Op("vfadd.vv", c, [na, "bias"], "vfadd.vv {d}, {s0}, {s1}", kill=na))
                    t = f"t{o}_{col}"
                    ops.append(Op("vadd.vv", f"m{o}_{col}", [c], "vadd.vv v0, {s0}, {s0}"))
                    ops.append(Op("vmsltu.vx", f"k{o}_{col}", [f"m{o}_{col}"], "vmsltu.vx v0, v0, a6",  # a6 = 0xFF000001
                                  kill=f"m{o}_{col}"))
                    r = f"r{o}_{col}"
                    if int_clip:
                        ops.append(Op("vmax.vx", t, [c], "vmax.vx {d}, {s0}, zero"))
                        ops.append(Op("vmin.vx", r, [c, t, f"k{o}_{col}"], "vmin.vx {d}, {s1}, a7, v0.t", kill=c))
                    else:
                        ops.append(Op("vfmax.vf", t, [c], "vfmax.vf {d}, {s0}, fa5"))
                        ops.append(Op("vfmin.vf", r, [c, t, f"k{o}_{col}"], "vfmin.vf {d}, {s1}, fa4, v0.t", kill=c))
                    if indexed:
                        ops.append(Op("vsuxei32.v", None, [r, f"po_{j % m}"],
                                      f"vsuxei32.v {{s0}}, ({{s1}}), {index_register(o)}", col=j))
                    else:
                        ops.append(Op("vse32.v", None, [r, f"po{o}_{j % m}"], "vse32.v {s0}, ({s1})", col=j))
            if newacc is not None:
                o, col = newacc
                na = f"a{o}_{col}_00"
                if int_clip:
                    ops.append(Op("vfmul.vv", na, [x, "w00"], "vfmul.vv {d}, {s0}, {s1}", kill=x))
                else:
                    ops.append(Op("vfmadd.vv", na, [x, "w00", "bias"], "vfmadd.vv {d}, {s1}, {s2}", kill=x))
                acc[(o, col)] = na
    carried_out = {}
    for o in range(R):
        carried_out[acc[(o, U - 2)]] = ("P2", o)
        carried_out[acc[(o, U - 1)]] = ("P1", o)
    return ops, carried_in, carried_out


COLUMN_BYTES = 32
"""A pixel's stride in the loops (8 channels of float32); the pointers move by `addi` immediates of it (a wider
image's stride above 2047 bytes would take a register: the same cost)."""


def pointer_ops(ops):
    """Insert one `addi` per pointer and column, after the column's last use of it, moving the pointer to the next
    column that uses it (the same pointer's first column in the next iteration after its last)."""
    version, last = {}, {}
    for t, op in enumerate(ops):
        for k, src in enumerate(op.srcs):
            if src.startswith("p"):
                key = (src, op.col)
                if key not in last and any(p == src for p, _ in last):
                    version[src] = version.get(src, 0) + 1
                op.srcs[k] = f"{src}@{version.get(src, 0)}"
                last[key] = t
    columns = 1 + max(op.col for op in ops)
    used = {}
    for name, col in last:
        used.setdefault(name, []).append(col)
    after = {}
    for (name, col), t in last.items():
        cols = sorted(used[name])
        later = [c for c in cols if c > col]
        after[t] = (name, (later[0] if later else cols[0] + columns) - col)
    out = []
    for t, op in enumerate(ops):
        out.append(op)
        if t in after:
            p, gap = after[t]
            v = op.srcs[[s.split("@")[0] for s in op.srcs].index(p)]
            out.append(Op("add", f"{p}@{int(v.split('@')[1]) + 1}", [v], f"addi {{p}}, {{p}}, {gap * COLUMN_BYTES}"))
            out[-1].ptr = p
    return out


def pin_deps(ops, cin, cout):
    """(load index, store index): a loop-carried chain's register is free for the next one after the store."""
    byname = {op.dst: i for i, op in enumerate(ops) if op.dst}
    def root(v):
        i = byname[v]
        while ops[i].kill and ops[i].kill in byname:
            i = byname[ops[i].kill]
        return i
    def last_store(v):
        chain = {v}
        for op in ops:
            if op.kill in chain:
                chain.add(op.dst)
        return max(i for i, op in enumerate(ops) if op.mn in ("vse32.v", "vsuxei32.v") and op.srcs[0] in chain)
    key_in = {key: v for v, key in cin.items()}
    return [(root(v), last_store(key_in[key])) for v, key in cout.items()]


def dependencies(ops, extra=()):
    """Per op, the ops that must come before it: its operands' producers, the other readers of a value it
    overwrites in place (and of a pointer it moves), and `extra` (op, op before it) pairs."""
    producer = {op.dst: i for i, op in enumerate(ops) if op.dst}
    readers = {}
    for i, op in enumerate(ops):
        for s in op.srcs:
            readers.setdefault(s, []).append(i)
    deps = [set() for _ in ops]
    for i, op in enumerate(ops):
        deps[i] |= {producer[s] for s in op.srcs if s in producer}
        overwritten = op.kill or (op.srcs[0] if op.mn == "add" else None)
        if overwritten:
            deps[i] |= {r for r in readers.get(overwritten, []) if r != i}
    for x, y in extra:
        deps[x].add(y)
    return deps, readers


def schedule(ops, budget, extra=(), jitter=None):
    """Greedy list schedule over an in-order dual-issue model of the X60 (mca's rules): the op that can issue
    first, ties to the longest path to the end (plus jitter[op], when given: random restarts)."""
    n = len(ops)
    deps, readers = dependencies(ops, extra)
    succ = [[] for _ in ops]
    for i in range(n):
        for d in deps[i]:
            succ[d].append(i)
    prio = [0] * n
    for i in reversed(range(n)):
        prio[i] = LAT[ops[i].mn] + max((prio[s] for s in succ[i]), default=0)
    ready_at = {}
    st = {"cyc": 0, "slots": 0, "wb": 0, "VFP": 0, "VLS": 0, "VIEU": 0, "ALU0": 0, "ALU1": 0, "IEUA": 0}
    done = set(); order = []
    live = {s for op in ops for s in op.srcs if s.startswith("in")}
    remaining = {k: len(v) for k, v in readers.items()}
    mask_live = False

    def earliest(i, st):
        op = ops[i]
        s = max([st["cyc"]] + [ready_at.get(src, 0) for src in op.srcs])
        u = UNIT[op.mn][0]
        s = max(s, min(st["ALU0"], st["ALU1"]) if u == "ALU" else st[u])
        if s == st["cyc"] and st["slots"] >= 2:
            s += 1
        return max(s, st["wb"] - LAT[op.mn])

    def issue(i, s, st):
        st = dict(st)
        op = ops[i]
        if s > st["cyc"]:
            st["cyc"], st["slots"] = s, 0
        st["slots"] += 1
        u, occ = UNIT[op.mn]
        if u == "ALU":
            u = "ALU0" if st["ALU0"] <= st["ALU1"] else "ALU1"
        st[u] = s + occ
        st["wb"] = s + LAT[op.mn]
        return st

    while len(done) < n:
        cands = []
        for i in range(n):
            if i in done or not deps[i] <= done:
                continue
            op = ops[i]
            loads = op.mn in ("vle32.v", "vluxei32.v")
            if (loads or op.mn in ("vfmax.vf", "vmax.vx")) and len(live) + 1 + 2 * loads > budget:
                continue
            if op.mn == "vadd.vv" and mask_live:
                continue
            cands.append(i)
        if not cands:
            raise RuntimeError(f"deadlock at {len(done)}/{n}, live {len(live)}")
        best = None
        for i in cands:
            s = earliest(i, st)
            key = (s, -prio[i] - (jitter[i] if jitter else 0))
            if best is None or key < best[0]:
                best = (key, i, s)
        _, i, s = best
        op = ops[i]
        st = issue(i, s, st)
        if op.dst:
            ready_at[op.dst] = s + LAT[op.mn]
            live.add(op.dst) if op.mn not in ('add', 'vadd.vv', 'vmsltu.vx') else None
        for src in op.srcs:
            remaining[src] -= 1
            if remaining[src] == 0:
                live.discard(src)
        if op.kill:
            live.discard(op.kill)
        if op.mn == "vadd.vv":
            mask_live = True
        if op.mn in ("vfmin.vf", "vmin.vx"):
            mask_live = False
        done.add(i)
        order.append(i)
    return order, st["cyc"]


def simulate(ops, seq) -> int:
    """Cycles of ops in the order seq (indices) on the in-order model: the last issue cycle."""
    ready, busy = {}, {"VFP": 0, "VLS": 0, "VIEU": 0, "ALU0": 0, "ALU1": 0, "IEUA": 0}
    cyc = slots = wb = 0
    for i in seq:
        op = ops[i]
        lat = LAT[op.mn]
        u, occ = UNIT[op.mn]
        if u == "ALU":
            u = "ALU0" if busy["ALU0"] <= busy["ALU1"] else "ALU1"
        s = max([cyc, busy[u], wb - lat] + [ready.get(src, 0) for src in op.srcs])
        if s == cyc and slots >= 2:
            s += 1
        if s > cyc:
            cyc, slots = s, 0
        slots += 1
        busy[u], wb = s + occ, s + lat
        if op.dst:
            ready[op.dst] = s + lat
    return cyc


def chains(ops, carried_out):
    """Value -> the first value of its in-place chain (one register), and the chains that leave the loop."""
    root = {}
    for op in ops:
        for src in op.srcs:
            if src.startswith("in"):
                root[src] = src
    for op in ops:
        if op.dst and op.mn not in ("add", "vadd.vv", "vmsltu.vx"):
            root[op.dst] = root[op.kill] if op.kill else op.dst
    return root, {root[v] for v in carried_out}


def legal(ops, seq, deps, budget, root, leaving) -> bool:
    """seq keeps every dependency, one mask in v0 at a time, and at most budget vector registers live."""
    pos = {i: k for k, i in enumerate(seq)}
    if any(pos[d] > pos[i] for i in seq for d in deps[i]):
        return False
    mask = False
    start, end = {}, {}
    for k, i in enumerate(seq):
        op = ops[i]
        if op.mn == "vadd.vv":
            if mask:
                return False
            mask = True
        elif op.mn in ("vfmin.vf", "vmin.vx"):
            mask = False
        for v in [*op.srcs, op.dst]:
            if v in root:
                r = root[v]
                start.setdefault(r, -1 if r.startswith("in") else k)
                end[r] = len(seq) if r in leaving else k
    delta = [0] * (len(seq) + 2)
    for r, a in start.items():
        delta[a + 1] += 1
        delta[end[r] + 1] -= 1
    live = 0
    for d in delta:
        live += d
        if live > budget:
            return False
    return True


def refine(ops, seq, deps, budget, carried_out, window: int = 16, rounds: int = 3):
    """Local search over seq: move one op up to window places when the model says it saves cycles."""
    root, leaving = chains(ops, carried_out)
    best = simulate(ops, seq)
    for _ in range(rounds):
        improved = False
        for i in list(seq):
            k = seq.index(i)
            for q in range(max(0, k - window), min(len(seq), k + window + 1)):
                if q == k:
                    continue
                trial = seq[:k] + seq[k + 1:]
                trial.insert(q, i)
                c = simulate(ops, trial)
                if c < best and legal(ops, trial, deps, budget, root, leaving):
                    seq, best, improved = trial, c, True
                    k = q
        if not improved:
            break
    return seq, best


def allocate(order, cin, cout, regs):
    """Vector registers for each in-place chain (interval coloring, loop-carried chains pinned)."""
    root = {}
    for v in cin:
        root[v] = v
    start, end = {}, {}
    for v in cin:
        start[v] = -1
    for t, op in enumerate(order):
        for s in op.srcs:
            if s in root:
                end[root[s]] = t
        if op.dst and op.mn not in ("add", "vadd.vv", "vmsltu.vx"):
            r = root[op.kill] if op.kill else op.dst
            root[op.dst] = r
            start.setdefault(r, t)
            end[r] = max(end.get(r, t), t)
    for v in cout:
        end[root[v]] = 10 ** 9
    pin = {}
    names = {}
    slot_of = {key: regs[k] for k, key in enumerate(sorted(cin.values()))}
    for v, key in cin.items():
        pin[v] = slot_of[key]
    for v, key in cout.items():
        pin[root[v]] = slot_of[key]
    chains = sorted(start, key=lambda r: start[r])
    pinned_starts = {}
    for r, reg in pin.items():
        pinned_starts.setdefault(reg, []).append(start[r])
    free_at = {reg: -2 for reg in regs}
    for r in chains:
        if r in pin:
            reg = pin[r]
            if free_at[reg] > start[r]:
                raise RuntimeError(f"pinned {reg} busy for {r}")
        else:
            ok = [reg for reg in regs if free_at[reg] <= start[r]
                  and all(ps > end[r] or ps < start[r] for ps in pinned_starts.get(reg, []))]
            if not ok:
                raise RuntimeError(f"no register for {r} at {start[r]}")
            reg = min(ok, key=lambda g: free_at[g])
        names[r] = reg
        free_at[reg] = end[r]
    return {v: names[root[v]] for v in root}


def emit(order, regmap, ptrmap):
    """The scheduled ops as assembly: weights v1-v9, the bias v10, masks in v0."""
    lines = []
    for op in order:
        if op.mn == "add":
            p = ptrmap[op.ptr]
            lines.append(op.fmt.format(p=p))
            continue
        vals = {}
        if op.dst and op.mn not in ("vadd.vv", "vmsltu.vx"):
            vals["d"] = regmap[op.dst]
        for i, s in enumerate(op.srcs):
            if s.startswith("p"):
                vals[f"s{i}"] = ptrmap[s.split("@")[0]]
            elif s.startswith("w") or s == "bias":
                vals[f"s{i}"] = {"bias": "v10"}.get(s) or f"v{1 + 3 * int(s[1]) + int(s[2])}"
            elif s.startswith(("m", "k")):
                vals[f"s{i}"] = "v0"
            else:
                vals[f"s{i}"] = regmap[s]
        lines.append(op.fmt.format(**vals))
    return lines


def mca(body, tool="llvm-mca-22"):
    """llvm-mca's cycles per iteration and block reciprocal throughput of an e32 m1 loop."""
    asm = "# LLVM-MCA-RISCV-LMUL M1\n# LLVM-MCA-RISCV-SEW E32\n.Lhot:\n" + "\n".join(body) + "\n"
    out = subprocess.run([tool, "-mtriple=riscv64", "-mcpu=spacemit-x60", "-mattr=+m,+a,+f,+d,+c,+v,+zvl256b",
                          "-iterations=200"], input=asm, capture_output=True, text=True, check=True).stdout
    return (int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 200,
            float(re.search(r"Block RThroughput:\s+([\d.]+)", out).group(1)))
