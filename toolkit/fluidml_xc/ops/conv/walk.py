"""ConvKernel: one float Conv being emitted (its kernel builder, ConvPlan, operand pointers, build-time tables and the
parallel tile being emitted) and the walks every blocking shares: channel blocks, output rows (interior rows with
constant tap ranges, border rows from tables), pixel blocks along a row, and the parallel split. Over dims that vary at
run time (ConvPlan.spans) the walks run to run-time extents: the padding-free interior is a run-time range, the
positions before it keep their build-time tap starts, and those after it take tap ranges clamped to the actual
input, computed at run time (never reading past the actual extent)."""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from llvmlite import ir

from ...kernels.conv_geometry import channel_k_steps, runtime_tap_range, tap_range
from ...kernels.conv_plan import ConvPlan, ConvSpans, tap_span
from ...kernels.half_blocks import HALF_BLOCK, in_blocks, is_half
from ...symbolic import bounds, is_static
from ...target.arch import arch_of, riscv_vector, riscv_vlen
from ...kernels.kernel import PARALLEL_MIN_WORK, UNSHARED_MAC_WORK, Kernel, Operand, chunk_count
from ...kernels.loops import element, loop, offset


@dataclass
class ConvKernel:
    """The run-time side of a Conv kernel emission (conv2d.py lower_conv); the emitters (rows.py, channels.py, depthwise.py) read it and the plan."""

    k: Kernel
    plan: ConvPlan
    xp: ir.Value
    """Input pointer."""
    op: ir.Value
    """Output pointer."""
    w: Operand
    """The weights (read through their strides when not packed)."""
    bias: Operand | None
    res: tuple[tuple[int, ...], ir.Value] | None
    """(strides, pointer) of the fused residual input, viewed like the output."""
    packed: ir.Value | None = None
    """The packed constant weights (kernels/conv_plan.py pack_weights), or None for run-time weights."""
    tables: list[tuple[ir.Value, ir.Value]] | None = None
    """Per spatial dim, build-time tap-range tables (lo, hi) for border rows and columns."""
    bias_splat: ir.Value | None = None
    """Row pairs: each channel's bias repeated plan.bias_run times, read-only data."""
    cb_rng: tuple[ir.Value, ir.Value] | None = None
    """Parallel tile: run-time [lo, hi) of channel blocks (or depthwise channel units)."""
    row_rng: tuple[ir.Value, ir.Value] | None = None
    """Parallel tile: run-time [lo, hi) of output rows."""
    px_rng: tuple[ir.Value, ir.Value] | None = None
    """Parallel tile: run-time [lo, hi) of a flat row's pixel tiles."""
    px_runs: list[tuple[int, int, int]] | None = None
    """packs_input: the pixel runs (first column, size, blocks) of the group being emitted."""
    xpack: ir.Value | None = None
    """packs_input: the packed input on the stack."""
    pack_origin: int = 0
    pack_width: int = 0
    """packs_input: the first column and width of the packed group."""
    carry: tuple[dict, dict] | None = None
    """Row pair loops carrying edge vectors: (slots, this pair's vectors) while a pair is emitted."""
    px_ends: tuple | None = None
    """Parallel tile over a run-time count of pixel tiles: (first chunk, last chunk) conditions (chunks may be
    empty, so the columns before and after the tiles go with the chunk, not with its tiles)."""
    rt: dict | None = None
    """Varying dims (plan.spans): the spans' fields as values of the node function (ints where they cannot vary),
    computed once at its start (`start_spans`)."""

    def start_spans(self) -> None:
        sp: ConvSpans | None = self.plan.spans
        if sp is None:
            return
        dv = self.k.dim_value
        self.rt = {"N": dv(sp.N), "H": dv(sp.H), "W": dv(sp.W), "OH": dv(sp.OH), "OW": dv(sp.OW), "rows": dv(sp.rows[1]),
                   "cols": dv(sp.cols[1]), "taps": dv(sp.taps[1]), "tiles": dv(sp.tiles)}

    @property
    def N(self):
        """Images: the run-time count when the batch varies."""
        return self.plan.shape.N if self.rt is None else self.rt["N"]

    def varies(self, axis: int) -> bool:
        """Do the rows (axis 0) or columns (axis 1) of this conv vary at run time?"""
        sp = self.plan.spans
        if sp is None:
            return False
        dims = (sp.H, sp.OH, sp.rows[1]) if axis == 0 else (sp.W, sp.OW, sp.cols[1], sp.taps[1], sp.tiles)
        return not all(is_static(d) for d in dims)

    def fixed_taps(self, axis: int, o: int):
        """Tap range of build-time position o before the interior of a varying axis: its start fixed, its end from
        the actual size (a run-time value only when some size of the range cuts the window)."""
        s, sp = self.plan.shape, self.plan.spans
        geo = (s.sh, s.dh, s.ph, s.KH, sp.H) if axis == 0 else (s.sw, s.dw, s.pw, s.KW, sp.W)
        lo, hi = tap_span(o, *geo, sp.ranges)
        return lo, self.k.dim_value(hi)

    def end_taps(self, axis: int, o):
        """Tap range of run-time position o after the interior of a varying axis: taps up to the actual size."""
        s = self.plan.shape
        geo = (s.sh, s.dh, s.ph, s.KH) if axis == 0 else (s.sw, s.dw, s.pw, s.KW)
        return runtime_tap_range(self.k, o, *geo, self.rt["H" if axis == 0 else "W"])

    def below(self, o: int, extent_key: str, bound):
        """`o < extent` at run time, None when every size of the range has it."""
        if bounds(bound, self.plan.spans.ranges)[0] > o:
            return None
        return self.k.b.icmp_signed("<", self.k.index(o), self.k.as_index(self.rt[extent_key]))

    def border_taps(self, axis: int, o):
        """Tap range of border row (axis 0) or column (axis 1) o: constant, or from a build-time table."""
        s = self.plan.shape
        if isinstance(o, int):
            return tap_range(o, *((s.sh, s.dh, s.ph, s.KH, s.H) if axis == 0 else (s.sw, s.dw, s.pw, s.KW, s.W)))
        lo, hi = self.tables[axis]
        return self.k.b.load(element(self.k, lo, o)), self.k.b.load(element(self.k, hi, o))

    def each(self, rng, fn, unroll: bool):
        """fn(t) for t in [lo, hi): unrolled when the bounds are constant and unroll is set, else a loop (not
        vectorized when unroll is set: a few taps of a border row, from the tables)."""
        lo, hi = rng
        if isinstance(lo, int) and isinstance(hi, int):
            if unroll or hi - lo <= 1:
                for t in range(lo, hi):
                    fn(t)
                return
            if hi <= lo:
                return
        with loop(self.k, hi, lo, vectorize=not unroll) as t:
            fn(t)

    def input_channels(self, slots: list, fn, steps: int = 1) -> None:
        """fn(ci) for every input channel of a group, accumulating into `slots`; float16 in blocks of channels
        whose taps make about HALF_BLOCK multiply-adds per accumulator, summed in float32 (kernels/half_blocks.py).
        steps (not float16; channel_steps): channels per loop iteration, the Cig % steps left after the loop."""
        cig, p = self.plan.shape.Cig, self.plan
        if not is_half(p.dtype) and steps > 1:
            with loop(self.k, cig // steps) as t:
                for s in range(steps):
                    fn(self.k.b.add(self.k.b.mul(t, self.k.index(steps), flags=("nsw",)), self.k.index(s), flags=("nsw",)))
            for ci in range(cig - cig % steps, cig):
                fn(ci)
            return
        if not is_half(p.dtype):
            self.each((0, cig), fn, False)
            return
        per = max(1, HALF_BLOCK // (p.shape.KH * p.shape.KW))
        in_blocks(self.k, cig, slots, lambda lo, hi: self.each((lo, hi), fn, False), 0, per)

    def scalar_riscv(self) -> bool:
        """RISC-V without V: the kernels' vectors are scalarized into the 32 FP registers."""
        return self.k.spec is not None and arch_of(self.k.spec.triple).riscv and not riscv_vlen(self.k.spec.features)

    def rvv(self) -> bool:
        """RISC-V with V: an empty asm statement (opaque) there also forgets the vector type, a `vsetivli` after it."""
        return self.k.spec is not None and riscv_vector(self.k.spec.triple, self.k.spec.features)

    def channel_steps(self) -> int:
        """Input channels per loop iteration (kernels/conv_geometry.py channel_k_steps): a 1x1 conv's the target's K
        steps (target/arch.py Arch.k_steps: 3 on the in-order RISC-V cores, whose loop increments and branch wait for
        the multiply-adds before them), 1 elsewhere and for larger kernels; more over unpacked channels-last on RVV."""
        s = self.plan.shape
        if self.k.spec is None or not isinstance(s.Cig, int):
            return 1
        unpacked_last = self.rvv() and self.plan.blocking.kind == "channels" and s.xs[1] == 1 and self.xpack is None
        return channel_k_steps(arch_of(self.k.spec.triple).k_steps, unpacked_last, s.Cig, s.KH * s.KW)

    def span(self, lo, hi, fn):
        """fn(i) for i in [lo, hi) at run time (inline when it is a single index)."""
        if not isinstance(lo, int) or not isinstance(hi, int):
            with loop(self.k, hi, lo) as i:
                fn(i)
        elif hi - lo == 1:
            fn(lo)
        elif hi > lo:
            with loop(self.k, hi, lo) as i:
                fn(i)

    def when(self, cond):
        """`if cond:` at run time (cond None: always)."""
        return nullcontext() if cond is None else self.k.b.if_then(cond)

    def fence(self):
        """An empty asm statement with side effects: the machine scheduler moves no load or store across it."""
        self.k.b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "", side_effect=True), [])

    def settle(self, slots):
        """Each accumulator through an empty asm statement with side effects: the multiply-adds before it
        complete first, and the loads after it (the next kernel row's) stay after it."""
        b = self.k.b
        for row in slots:
            for slot in row:
                v = b.load(slot)
                b.store(b.call(ir.InlineAsm(ir.FunctionType(v.type, [v.type]), "", "=w,0", side_effect=True), [v]), slot)

    def settle_lanes(self, slots):
        """settle for accumulators of scalarized vectors (RISC-V without V, scalar_riscv): each lane through its own
        empty asm statement on an FP register."""
        b = self.k.b
        for row in slots:
            for slot in row:
                v = b.load(slot)
                for lane in range(v.type.count):
                    idx = ir.Constant(ir.IntType(32), lane)
                    x = b.extract_element(v, idx)
                    v = b.insert_element(v, b.call(ir.InlineAsm(ir.FunctionType(x.type, [x.type]), "", "=f,0", side_effect=True), [x]), idx)
                b.store(v, slot)

    def opaque(self, ptr):
        """ptr through an empty asm statement: a value LLVM cannot see through, so loads from it stay where they are."""
        return self.k.b.call(ir.InlineAsm(ir.FunctionType(ptr.type, [ptr.type]), "", "=r,0"), [ptr])

    def channel_blocks(self, fn):
        """fn(cb, R) per block of R output channels of a group (under cb_rng: the blocks [lo, hi) of them)."""
        R = self.plan.blocking.R
        full, rest = divmod(self.plan.shape.Cog, R)
        if self.cb_rng is not None:
            k, (lo, hi) = self.k, self.cb_rng
            with loop(k, k.imin(hi, k.index(full)), lo) as cb:
                fn(cb, R)
            if rest:
                with k.b.if_then(k.b.icmp_signed(">", hi, k.index(full))):
                    fn(full, rest)
            return
        self.span(0, full, lambda cb: fn(cb, R))
        if rest:
            fn(full, rest)

    def px_parts(self, tiles: int):
        """Under px_rng: (first, last, (t0, t1)) = conditions for the fixed blocks before / after the
        tile loop and its range; else (None, None, None)."""
        if self.px_rng is None:
            return None, None, None
        k, (t0, t1) = self.k, self.px_rng
        if self.px_ends is not None:
            return (*self.px_ends, (t0, t1))
        return (k.b.icmp_signed("==", t0, k.index(0)), k.b.icmp_signed("==", t1, self.k.as_index(tiles)), (t0, t1))

    def rows(self, emit_row, emit_pair=None, carry=None):
        """Interior rows with the full constant tap range (emit_pair(oh): rows oh and oh + 1 at once, then
        the odd one; carry(a, count): count pairs from row a in a loop that carries edge vectors); border
        rows with table ranges."""
        if self.varies(0):
            return self.rows_varying(emit_row)
        s = self.plan.shape
        if self.plan.zero_rows:  # every row the interior's code (padded kernel rows read the zero row)
            return self.span(*(self.row_rng or (0, s.OH)), lambda oh: emit_row(oh, (0, s.KH)))
        lo, hi = self.plan.rows_inside
        hi = max(hi, lo)
        k, full = self.k, (0, s.KH)

        def interior(a, b):
            if emit_pair is None:
                with loop(k, b, a) as oh:
                    emit_row(oh, full)
                return
            pairs = k.b.sdiv(k.b.sub(b, a), k.index(2))
            if carry is not None:
                carry(a, pairs)
            else:
                with loop(k, pairs) as p:
                    emit_pair(k.b.add(a, k.b.mul(p, k.index(2), flags=("nsw",)), flags=("nsw",)))
            with k.b.if_then(k.b.icmp_signed("<", k.b.add(a, k.b.mul(pairs, k.index(2))), b)):
                emit_row(k.b.sub(b, k.index(1)), full)
        if self.row_rng is not None:
            r0, r1 = self.row_rng

            def border(a, b):
                if b - a > 4:  # many border rows: a loop with their tap ranges from the tables
                    with loop(k, k.imin(r1, k.index(b)), k.imax(r0, k.index(a))) as oh:
                        emit_row(oh, self.border_taps(0, oh))
                    return
                for oh in range(a, b):  # a few: each with its constant tap range, when in range
                    inside = k.b.and_(k.b.icmp_signed("<=", r0, k.index(oh)), k.b.icmp_signed(">", r1, k.index(oh)))
                    with k.b.if_then(inside):
                        emit_row(oh, self.border_taps(0, oh))
            if self.plan.border_loop:
                self.border_rows(lo, hi, emit_row)
            else:
                border(0, lo)
            if hi > lo:
                stop = k.imin(r1, k.index(hi))
                interior(k.imax(r0, k.index(lo)), stop)
            if not self.plan.border_loop:
                border(hi, s.OH)
            return
        paired = carry is not None and hi - lo >= 4 or emit_pair is not None and hi - lo >= 2
        odd = (hi - lo) % 2 if paired else 0
        if self.plan.border_loop:  # with the odd interior row after the pairs, its table range the full one
            self.border_rows(lo, hi - odd, emit_row)
        else:
            self.span(0, lo, lambda oh: emit_row(oh, self.border_taps(0, oh)))
        if carry is not None and hi - lo >= 4:
            carry(k.index(lo), (hi - lo) // 2)
        elif paired:
            self.span(0, (hi - lo) // 2, lambda p: emit_pair(offset(k, lo, (p, 2))))
        if odd and not self.plan.border_loop:
            emit_row(hi - 1, full)
        if not paired:
            self.span(lo, hi, lambda oh: emit_row(oh, full))
        if not self.plan.border_loop:
            self.span(hi, s.OH, lambda oh: emit_row(oh, self.border_taps(0, oh)))

    def border_rows(self, lo: int, hi: int, emit_row):
        """The padded rows [0, lo) and [hi, OH) in one loop (plan.border_loop), each with its tap range from the
        table (under row_rng: the rows of [r0, r1) among them)."""
        k, b = self.k, self.k.b
        with loop(k, lo + self.plan.shape.OH - hi) as j:
            oh = b.select(b.icmp_signed("<", j, k.index(lo)), j, b.add(j, k.index(hi - lo), flags=("nsw",)))
            cond = None
            if self.row_rng is not None:
                r0, r1 = self.row_rng
                cond = b.and_(b.icmp_signed("<=", r0, oh), b.icmp_signed(">", r1, oh))
            with self.when(cond):
                emit_row(oh, self.border_taps(0, oh))

    def rows_varying(self, emit_row):
        """rows() over a run-time row count: the rows before the interior one by one (each while it exists), the
        interior [lo, rows) with the full tap range, the rows after it with run-time tap ranges; under row_rng the
        rows [r0, r1) of them."""
        k, s, sp = self.k, self.plan.shape, self.plan.spans
        lo, hi, count = sp.rows[0], self.k.as_index(self.rt["rows"]), self.k.as_index(self.rt["OH"])
        r0, r1 = self.row_rng or (None, None)
        for oh in range(lo):
            conds = [c for c in (self.below(oh, "OH", sp.OH), r0 is not None and k.b.icmp_signed("<=", r0, k.index(oh)),
                                 r1 is not None and k.b.icmp_signed(">", r1, k.index(oh))) if c not in (None, False)]
            cond = None
            for c in conds:
                cond = c if cond is None else k.b.and_(cond, c)
            with self.when(cond):
                emit_row(oh, self.fixed_taps(0, oh))
        a, b = k.index(lo), hi
        if r0 is not None:
            a, b = k.imax(r0, a), k.imin(r1, b)
        with loop(k, b, a) as oh:
            emit_row(oh, (0, s.KH))
        a, b = (hi, count) if r0 is None else (k.imax(r0, hi), k.imin(r1, count))
        with loop(k, b, a) as oh:
            emit_row(oh, self.end_taps(0, oh))

    def fixed_columns(self, lo: int, emit_one, emit_group=None):
        """The columns before the interior of a varying row: emit_group(first, their tap ranges) in blocks when
        every size of the range has them all with the same tap ranges, else emit_one(ow, tap range) each while it
        exists."""
        sp = self.plan.spans
        taps = [self.fixed_taps(1, o) for o in range(lo)]
        if emit_group is not None and bounds(sp.OW, sp.ranges)[0] >= lo and all(isinstance(t[1], int) for t in taps):
            emit_group(taps)
            return
        for o in range(lo):
            with self.when(self.below(o, "OW", sp.OW)):
                emit_one(o, self.fixed_taps(1, o))

    def pixel_blocks_varying(self, emit):
        """pixel_blocks over a run-time row: the columns before the interior, tiles of P to the end of the interior
        (its last partial tile as blocks of 2^j pixels), the columns after it one by one with run-time tap ranges."""
        s, k, P, sp = self.plan.shape, self.k, self.plan.blocking.P, self.plan.spans
        lo, hi, tiles = sp.taps[0], self.k.as_index(self.rt["taps"]), self.rt["tiles"]
        first, last, trange = self.px_parts(tiles)
        balanced = self.plan.blocking.kind == "channels"

        def group(taps):
            count = -(-lo // P)
            for i in range(count):
                c, d = (lo * i // count, lo * (i + 1) // count) if balanced else (i * P, min(lo, (i + 1) * P))
                emit(c, taps[c:d])
        with self.when(first):
            self.fixed_columns(lo, lambda o, t: emit(o, [t]), group)
        a, b = trange or (0, tiles)
        with loop(k, self.k.as_index(b), self.k.as_index(a)) as t:
            emit(offset(k, lo, (t, P)), [(0, s.KW)] * P)
        with self.when(last):
            pos = offset(k, lo, (self.k.as_index(tiles), P))
            self.binary_blocks(pos, k.b.sub(hi, pos), P, lambda at, count: emit(at, [(0, s.KW)] * count))
            with loop(k, self.k.as_index(self.rt["OW"]), hi) as ow:
                emit(ow, [self.end_taps(1, ow)])

    def pixel_tiles(self, emit):
        """emit(row, column, count) over an image's actual pixels in row-major order (form "pixels"): tiles of P
        (under px_rng: the tiles [t0, t1)), each tile's first row and column carried from the one before (one
        division per run of tiles), then the last partial tile as blocks of 2^j pixels."""
        k, b, P = self.k, self.k.b, self.plan.blocking.P
        tiles, width = self.rt["tiles"], self.k.as_index(self.rt["OW"])
        _, last, trange = self.px_parts(tiles)
        first_tile, end = (self.k.as_index(v) for v in (trange or (0, tiles)))
        row, col = self.row_col(offset(k, 0, (first_tile, P)))
        slots = [k.local(k.idx_t, v) for v in (row, col)]
        with loop(k, end, first_tile):
            row, col = (b.load(slot) for slot in slots)
            emit(row, col, P)
            for slot, v in zip(slots, self.wrapped(row, b.add(col, k.index(P)))):
                b.store(v, slot)
        with self.when(last):
            pos = offset(k, 0, (self.k.as_index(tiles), P))
            rest = b.sub(b.mul(self.k.as_index(self.rt["OH"]), width), pos)
            self.binary_blocks(pos, rest, P, lambda q, count: emit(*self.row_col(q), count))

    def wrapped(self, row, col):
        """(row, column) of column `col` of row `row` counted past the row's end (col < width + P): the rows a tile
        crosses, at most 1 + (P - 1) // (the least width), by that many conditional subtractions."""
        k, b = self.k, self.k.b
        width = k.as_index(self.rt["OW"])
        least = bounds(self.plan.spans.OW, self.plan.spans.ranges)[0]
        for _ in range(1 + (self.plan.blocking.P - 1) // max(1, least)):
            wrap = b.icmp_signed(">=", col, width)
            row, col = b.add(row, b.zext(wrap, k.idx_t)), b.select(wrap, b.sub(col, width), col)
        return row, col

    def row_col(self, q):
        """(row, column) of pixel q of the actual image (rows of the run-time width)."""
        b, width = self.k.b, self.k.as_index(self.rt["OW"])
        row = b.udiv(q, width)
        return row, b.sub(q, b.mul(row, width))

    def binary_blocks(self, pos, rest, P: int, emit):
        """emit(position, 2^j) for each bit j set in rest (< P), positions consecutive from pos."""
        k, bit = self.k, 1 << (P - 1).bit_length()
        while bit > 1:
            bit //= 2
            with k.b.if_then(k.b.icmp_signed("!=", k.b.and_(rest, k.index(bit)), k.index(0))):
                emit(k.b.add(pos, k.b.and_(rest, k.index(-2 * bit))), bit)

    def pixel_block(self, row, col, count: int, block):
        """`count` pixels of the actual image from (row, col) on: block(oh, ow, None) when they lie in one row
        (constant offsets from one base, as a static row's tile), else block(oh, ow, spots) with each pixel's (row,
        column) offset from (oh, ow). A full tile across one row end has one version per split (the next row's
        pixels at constant offsets from a second base); a block across more row ends (rows narrower than a tile) or
        shorter than a tile (the image's last) takes its spots at run time."""
        k, b = self.k, self.k.b
        width = k.as_index(self.rt["OW"])
        least = bounds(self.plan.spans.OW, self.plan.spans.ranges)[0]

        def spots():
            out = []
            for i in range(count):
                r, c = self.wrapped(k.index(0), b.add(col, k.index(i)))
                out.append((r, b.sub(c, col)))
            block(row, col, out)

        def one_end():
            done = k.fn.append_basic_block("row_end.done")
            switch = b.switch(b.sub(width, col), done)
            for split in range(1, count):
                case = k.fn.append_basic_block(f"row_end.{split}")
                switch.add_case(k.index(split), case)
                b.position_at_end(case)
                block(row, col, [(0, i) if i < split else (1, b.sub(k.index(i), width)) for i in range(count)])
                b.branch(done)
            b.position_at_end(done)
        with b.if_else(b.icmp_signed("<=", b.add(col, k.index(count)), width)) as (one_row, across):
            with one_row:
                block(row, col, None)
            with across:
                if count < self.plan.blocking.P:
                    spots()
                elif least >= count:
                    one_end()
                else:
                    with b.if_else(b.icmp_signed("<=", b.add(col, k.index(count)), b.add(width, width))) as (one, more):
                        with one:
                            one_end()
                        with more:
                            spots()

    def pixel_blocks(self, oh, kh_range, emit):
        """Every column of output row oh: emit(ow, kw ranges of its pixels) per block of up to P pixels.

        Columns known at build time (the borders, and every column of a narrow row) go in blocks
        whose pixels each have their own constant tap range (a run of such blocks with the whole kernel row, a narrow
        row's interior, as one loop: block_runs); the interior runs in a loop of tiles.
        Channel vectors balance the fixed blocks (7 columns as 4 + 3, not 6 + 1: a pixel's few accumulators
        wait on the FMA latency).
        """
        if self.px_runs is None and self.varies(1):
            self.pixel_blocks_varying(emit)
            return
        s, k, P = self.plan.shape, self.k, self.plan.blocking.P
        lo, tiles = self.plan.col_blocks
        balanced = self.plan.blocking.kind == "channels"

        def fixed(a, b):
            count = -(-(b - a) // P)
            blocks = []
            for i in range(count):
                c, d = (a + (b - a) * i // count, a + (b - a) * (i + 1) // count) if balanced else (a + i * P, min(b, a + (i + 1) * P))
                blocks.append((c, [tap_range(o, s.sw, s.dw, s.pw, s.KW, s.W) for o in range(c, d)]))
            self.block_runs(blocks, emit)
        if self.px_runs is not None:
            for c, size, count in self.px_runs:
                self.span(0, count, lambda t: emit(offset(k, c, (t, size)), [(0, 1)] * size))
            return
        first, last, trange = self.px_parts(tiles)
        if self.plan.edge_loop and trange is None:
            self.span(0, tiles, lambda t: emit(offset(k, lo, (t, P)), [(0, s.KW)] * P))
            self.edge_columns(lo, lo + tiles * P, emit)
            return
        with self.when(first):
            fixed(0, lo)
        if trange is not None:
            with loop(k, trange[1], trange[0]) as t:
                emit(offset(k, lo, (t, P)), [(0, s.KW)] * P)
        elif tiles == 1:
            emit(lo, [(0, s.KW)] * P)
        elif tiles:
            with loop(k, tiles) as t:
                emit(offset(k, lo, (t, P)), [(0, s.KW)] * P)
        with self.when(last):
            if balanced:
                fixed(lo + tiles * P, s.OW)
            else:
                hi = max(lo, self.plan.taps_inside[1])
                fixed(lo + tiles * P, hi)
                fixed(hi, s.OW)

    def block_runs(self, blocks: list, emit):
        """emit(first column, tap ranges) per fixed block in order; consecutive blocks of one size whose every pixel
        has the whole kernel row (a narrow row's interior) run as one loop: one copy of the block's code, not one per
        block."""
        full, i = (0, self.plan.shape.KW), 0
        while i < len(blocks):
            c, taps = blocks[i]
            j = i + 1
            if all(t == full for t in taps):
                while (j < len(blocks) and blocks[j][1] == taps
                       and blocks[j][0] - blocks[j - 1][0] == len(taps)):
                    j += 1
            if j - i > 1:
                size = len(taps)
                with loop(self.k, j - i) as t:
                    emit(offset(self.k, c, (t, size)), taps)
            else:
                emit(c, taps)
            i = j

    def edge_columns(self, a: int, b: int, emit):
        """The columns [0, a) and [b, OW) of a row in one loop (plan.edge_loop): emit(ow, [its tap range from the
        table]) per column."""
        k = self.k
        with loop(k, a + self.plan.shape.OW - b) as j:
            ow = k.b.select(k.b.icmp_signed("<", j, k.index(a)), j, k.b.add(j, k.index(b - a), flags=("nsw",)))
            emit(ow, [self.border_taps(1, ow)])

    def guarded(self, rng, taps: int, fn):
        """fn(t) for each constant t in [0, taps) under `if lo <= t < hi` (rng: run-time bounds): constant offsets
        for a range known only at run time."""
        b, (lo, hi) = self.k.b, rng
        for t in range(taps):
            idx = self.k.index(t)
            with b.if_then(b.and_(b.icmp_signed("<=", lo, idx), b.icmp_signed(">", hi, idx))):
                fn(t)

    def split(self):
        """Parallel split: (work, chunks of the groups tiled, chunks of channel blocks, chunks of rows or row tiles,
        which of the two `rows` / `px` the last is), outer loop of the order first, about TARGET_TILES tiles in all."""
        p, s = self.plan, self.plan.shape
        work = float(s.N) * s.OC * s.OH * s.OW * s.Cig * s.KH * s.KW * (UNSHARED_MAC_WORK if s.Cig == s.Cog == 1 else 1)
        if self.k.tile_range is None or work < PARALLEL_MIN_WORK:
            return None
        # groups in chunks: a depthwise conv's 272 groups were 272 tiles of a 14x14 plane each
        gc = chunk_count(p.groups_tiled, work, -(-chunk_count(1 << 30, work) // s.N))
        want = -(-chunk_count(1 << 30, work) // (s.N * gc))
        kind = p.blocking.kind
        if kind == "depthwise_c":  # rows, then channel vectors when the rows are few
            rc = chunk_count(s.OH, work, want)
            return work, gc, chunk_count(p.dw_units, work, -(-want // rc)), rc, "rows"
        if p.blocking.pointwise_tiles:
            return work, gc, chunk_count(p.NB, work, want), 1, "rows"
        unit, units = ("px", p.px_tiles) if s.flat or p.form.startswith("pixels") else ("rows", s.OH)
        if p.blocks_outer if kind == "channels" else not s.flat:
            cbc = chunk_count(p.NB, work, want)
            return work, gc, cbc, chunk_count(units, work, -(-want // cbc)), unit
        uc = chunk_count(units, work, want)
        return work, gc, chunk_count(p.NB, work, -(-want // uc)), uc, unit

    def emit_tiled(self, per_image) -> bool:
        """per_image(n, g) as parallel tiles (setting cb_rng / row_rng / px_rng per tile); False when not split."""
        p, s = self.plan, self.plan.shape
        split = self.split()
        if split is None or s.N * split[1] * split[2] * split[3] < 2:
            return False
        work, gc, cbc, uc, unit = split
        k = self.k
        units = s.OH if unit == "rows" else p.px_tiles
        if self.varies(0 if unit == "rows" else 1) or unit == "px" and self.rt is not None and not s.flat:
            units = self.rt["OH" if unit == "rows" else "tiles"]
        with k.parallel_tiles([s.N, gc, cbc, uc], work) as (n, g, c, u):
            with self.when(None if isinstance(self.N, int) else k.b.icmp_signed("<", n, self.N)):
                if cbc > 1:
                    self.cb_rng = k.chunk(c, cbc, p.dw_units if p.blocking.kind == "depthwise_c" else p.NB)
                if uc > 1:
                    if unit == "rows":
                        self.row_rng = k.chunk(u, uc, units)
                    else:
                        self.px_rng = k.chunk(u, uc, units)
                        if not isinstance(units, int):
                            self.px_ends = (k.b.icmp_signed("==", u, k.index(0)), k.b.icmp_signed("==", u, k.index(uc - 1)))
                if gc == p.groups_tiled:
                    per_image(n, g)
                else:
                    lo, hi = k.chunk(g, gc, p.groups_tiled)
                    with loop(k, hi, lo) as gi:
                        per_image(n, gi)
        self.cb_rng = self.row_rng = self.px_rng = self.px_ends = None
        return True
