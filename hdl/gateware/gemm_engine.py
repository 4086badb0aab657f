"""The GEMM engine: steps in, finished int8 output vectors out to the activation memory.

Data path of one step issued at cycle ``t`` (all latencies derived from the config)::

    t        activation memory read: the step's word and the next one
    t+R      R = its read latency: select the ``rows`` lanes from the step's lane on;
             padding rows read the zero point
    t+R+1    vector enters the systolic array; weights follow in diagonal skew
    t+A      A = R + 1 + array latency: the ``cols`` partial sums leave the array together
             first step of a tile pass: + bias; else + accumulator; not last: write back
    t+A+1    registered sums enter the requantizer (with split ops, ``t+A+2``: a stage
             first adds a split op's ``split`` columns an output)
    t+A+1+L  the requantizer's result (``L = Requantizer.LATENCY``) is written to the
             activation memory: ``out_count`` lanes from lane ``out_lane`` of word
             ``out_addr`` on, into the next word for a packed destination

The accumulator, bias and requantization-parameter memories are read two cycles before
their data is used and their outputs are registered, so that no path runs from a block
RAM's output through the adder (or into the requantizer's multipliers).
The accumulator memory is :mod:`collision-free <hdl.gateware.collisions>`: the writes
its read misses (those of the read's cycle and the two after it, to the same address:
batch-1 dense layers accumulate one address every cycle) are forwarded from the registers
that hold them, the latest first, never read.
"""
from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.config import AcceleratorConfig
from hdl.gateware.collisions import collision_free_memory
from hdl.gateware.pipeline import delayed
from hdl.compiler.program import READ_WORDS, Program
from hdl.gateware.requantizer import Requantizer, requant_params_layout
from hdl.gateware.activation_memory import ActivationMemory, window_read_port, write_port
from hdl.gateware.step import step_layout, step_stream
from hdl.gateware.systolic_array import SystolicArray
from hdl.gateware.weight_memory import WeightMemory
from hdl.compiler.widths import Widths, bits_for
from hdl.compiler.weight_image import ImageLayout, bias_word_values, requant_word_values
from hdl.gateware.load_port import load_port


def _bias_memory(prog: Program) -> memory.Memory:
    """The biases (zero point folded in) of each parameter word, ``cols`` lanes a word."""
    bits = prog.config.accumulator_bits
    return memory.Memory(shape=unsigned(bits * prog.config.cols), depth=len(prog.bias), init=bias_word_values(prog))


def _requant_memory(prog: Program) -> memory.Memory:
    """The requantization parameters of each parameter word."""
    layout = requant_params_layout(prog.config.cols, prog.config.data_bits)
    return memory.Memory(shape=unsigned(layout.size), depth=len(prog.bias), init=requant_word_values(prog))


class GemmEngine(wiring.Component):
    """Members
    -------
    steps: In stream, from the step generator.
    zero_point: In, the op's input zero point (read by padding taps).
    read: a read port of :meth:`read_words_for` consecutive words (``ActivationMemory.READ_LATENCY`` cycles
    after the address).
    write: writes of up to ``cols`` lanes from any lane of a word on: into one word, or,
    when some op writes a packed destination, :meth:`write_words_for` two consecutive ones.
    load_weights, load_biases, load_requant: In (with ``runtime_weights``), word writes
    into the weight, bias and requantization-parameter memories.
    """

    def __init__(self, program: Program, widths: Widths):
        cfg: AcceleratorConfig = program.config
        self._program, self._cfg, self._w = program, cfg, widths
        self._packed = self.write_words_for(program) == 2
        self._taps = self.taps_on_rows_kernels(program)
        self._splits = [s for s in program.split_factors if s > 1]
        members = {
            "steps": In(step_stream(widths, cfg)),
            "zero_point": In(signed(cfg.data_bits)),
            "read": Out(window_read_port(widths.act_addr, cfg.bank_width, cfg.data_bits,
                                         self.read_words_for(program))),
            "write": Out(write_port(widths.act_addr, cfg.bank_width, cfg.data_bits,
                                    self.write_words_for(program))),
        }
        if cfg.runtime_weights:
            image = ImageLayout.of(program)
            for name, words, bits in zip(("load_weights", "load_biases", "load_requant"), image.words, image.bits):
                members[name] = In(load_port(bits_for(words), bits))
        super().__init__(members)

    @staticmethod
    def write_words_for(program: Program) -> int:
        """Words one write spans: two when a packed destination's lanes can straddle words."""
        return 2 if any(op.dest.packed_lanes for op in program.gemm_ops) else 1

    @staticmethod
    def taps_on_rows_kernels(program: Program) -> list[tuple[int, int, int, int]]:
        """``(kh, kw, tap tiles, window depth)`` of the program's taps-on-rows ops, sorted,
        without repeats."""
        return sorted({op.kernel + (op.tap_tiles, op.window_depth) for op in program.gemm_ops if op.tap_tiles})

    @classmethod
    def read_words_for(cls, program: Program) -> int:
        """Words one read returns: two (a folded tile straddles two), with split ops their
        ``rows * split`` inputs, with taps-on-rows ops a whole window row (:data:`READ_WORDS`)."""
        if cls.taps_on_rows_kernels(program):
            return READ_WORDS
        cfg = program.config
        return max(2, *(split * cfg.rows // cfg.bank_width for split in program.split_factors))

    @staticmethod
    def requantizer_accumulator_bits(program: Program) -> int:
        """Width of the sums the requantizer takes. With weights fixed, the widest that the
        compiler proved any op's sums need (:meth:`Program.accumulator_bits_needed`: the
        accumulator's other bits are sign); with run-time weights, the accumulator's."""
        cfg = program.config
        if cfg.runtime_weights or not program.gemm_ops:
            return cfg.accumulator_bits
        return program.accumulator_bits_needed

    #: Cycles from a step to its vector entering the array (memory read, lane select).
    INPUT_LATENCY = ActivationMemory.READ_LATENCY + 1

    @property
    def sum_latency(self) -> int:
        """Cycles from a step to its sums leaving the array."""
        return self.INPUT_LATENCY + SystolicArray.latency_for(self._cfg.rows, self._cfg.cols)

    @staticmethod
    def split_latency_for(program: Program) -> int:
        """Cycles of the stage that adds a split op's columns: 1 with split ops, else 0."""
        return 1 if any(op.split > 1 for op in program.gemm_ops) else 0

    @property
    def split_latency(self) -> int:
        return self.split_latency_for(self._program)

    @property
    def write_latency(self) -> int:
        """Cycles from a step to its (last) write reaching the activation memory."""
        return self.sum_latency + 1 + self.split_latency + Requantizer.LATENCY

    def _window(self, m, step1, push):
        """The window buffer of taps-on-rows ops: rows of ``kw`` words (the ops' deepest
        window, :attr:`GemmOp.window_depth`, and widest kernel), a push shifting them up with
        the read's words as the bottom row (padding words the zero point). Returns each
        array row's word for ``step1``: tap ``tap_tile * rows + r`` of its kernel, ``(i, j)``
        in raster order, in the window that ends ``depth`` rows above the bottom after the
        push; rows past the taps read zero (their weights are zero)."""
        cfg, bits = self._cfg, self._cfg.data_bits
        rows, lanes = cfg.rows, cfg.bank_width
        word = data.ArrayLayout(signed(bits), lanes)
        kh_max = max(depth for _, _, _, depth in self._taps)
        kw_max = max(kw for _, kw, _, _ in self._taps)
        window = [[Signal(word, name=f"window_{i}_{j}") for j in range(kw_max)] for i in range(kh_max)]
        after = [[Signal(word, name=f"window_next_{i}_{j}") for j in range(kw_max)] for i in range(kh_max)]
        for i in range(kh_max):
            for j in range(kw_max):
                if i < kh_max - 1:
                    pushed = window[i + 1][j]
                else:
                    pushed = Signal(word, name=f"pushed_{j}")
                    read = self.read.data.as_value()[j * lanes * bits:(j + 1) * lanes * bits]
                    with m.If(step1.pad_words[j]):
                        m.d.comb += [pushed[c].eq(self.zero_point) for c in range(lanes)]
                    with m.Else():
                        m.d.comb += pushed.eq(read)
                m.d.comb += after[i][j].eq(Mux(push, pushed, window[i][j]))
                m.d.sync += window[i][j].eq(after[i][j])
        tap_words = [Signal(word, name=f"tap_word_{r}") for r in range(rows)]
        for kh, kw, tiles, depth in self._taps:
            with m.If((step1.kh == kh) & (step1.kw == kw)):
                with m.Switch(Cat(step1.tap_tile, step1.depth)):
                    for k in range(tiles):
                        for above in range(depth - kh + 1):
                            with m.Case(k | (above << len(step1.tap_tile))):
                                for r in range(rows):
                                    t = k * rows + r
                                    if t < kh * kw:
                                        i, j = divmod(t, kw)
                                        m.d.comb += tap_words[r].eq(after[kh_max - above - kh + i][j])
        return tap_words

    @staticmethod
    def _load_into(m, mem: memory.Memory, load):
        port = mem.write_port()
        m.d.comb += [port.en.eq(load.en), port.addr.eq(load.addr), port.data.eq(load.data)]

    def units(self) -> dict:
        """The engine's components, new instances, by submodule name (the weight memory,
        the array and the requantizer; :mod:`hdl.tools.unit_estimate` places each alone)."""
        cfg, prog, w = self._cfg, self._program, self._w
        tag_layout = data.StructLayout({"addr": unsigned(w.act_addr), "lane": range(cfg.bank_width),
                                        "count": range(cfg.cols + 1)})
        return {
            "weights": WeightMemory(prog.weight_words, w.weight_addr, prog.weight_formats,
                                    writable=cfg.runtime_weights),
            "array": SystolicArray(cfg.rows, cfg.cols, cfg.data_bits, cfg.accumulator_bits,
                                   lane_inputs=bool(self._taps or self._splits)),
            "requantizer": Requantizer(cfg.cols, self.requantizer_accumulator_bits(prog), cfg.data_bits, tag_layout,
                                       cfg.requantizer_multipliers),
        }

    def elaborate(self, platform):
        m = Module()
        cfg, prog, w = self._cfg, self._program, self._w
        rows, cols, bits = cfg.rows, cfg.cols, cfg.data_bits
        units = self.units()
        # The step with its valid bit, carried down the pipeline as one value.
        layout = step_layout(w, cfg)
        step = Signal(data.StructLayout({"valid": 1, **layout.members}))
        # ``valid``: the step uses the array (a push-only step only reads).
        m.d.comb += step.eq(Cat(self.steps.valid & ~self.steps.payload.push_only, self.steps.payload))

        # Activation read and lane selection.
        m.d.comb += self.read.addr.eq(step.act_addr)
        step1 = delayed(m, step, ActivationMemory.READ_LATENCY, "step")
        x_vec = Signal(data.ArrayLayout(signed(bits), rows))
        # Unfolded steps start at a group of rows lanes; folded ones anywhere.
        starts = range(cfg.bank_width) if any(op.folded for op in prog.gemm_ops) else \
            range(0, cfg.bank_width, rows)
        with m.Switch(step1.lane):
            for lane in starts:
                with m.Case(lane):
                    for r in range(rows):
                        m.d.comb += x_vec[r].eq(self.read.data[lane + r])
        x_sel = Signal.like(x_vec)
        for r in range(rows):
            with m.If(step1.pad | (step1.row_lo > r) | (step1.row_hi <= r)):
                m.d.comb += x_sel[r].eq(self.zero_point)
            with m.Else():
                m.d.comb += x_sel[r].eq(x_vec[r])
        if self._taps or self._splits:
            # Every PE gets its own activation: taps-on-rows steps a window word a row,
            # split steps element r * split + c % split of the read, the others their
            # row's activation in every lane.
            if self._taps:
                push = delayed(m, self.steps.valid & self.steps.payload.push, ActivationMemory.READ_LATENCY, "push")
                tap_words = self._window(m, step1, push)
            x_reg = Signal(data.ArrayLayout(data.ArrayLayout(signed(bits), cols), rows))
            for r in range(rows):
                m.d.sync += [x_reg[r][c].eq(x_sel[r]) for c in range(cols)]
                for split in self._splits:
                    with m.If(step1.split == split):
                        m.d.sync += [x_reg[r][c].eq(self.read.data[r * split + c % split]) for c in range(cols)]
                if self._taps:
                    with m.If(step1.taps_on_rows):
                        m.d.sync += x_reg[r].eq(tap_words[r])
        else:
            x_reg = Signal.like(x_vec)
            m.d.sync += x_reg.eq(x_sel)

        # Weights: diagonal d's weight must be there when the vector reaches PE (r, c),
        # d = r + c cycles after it entered the array at t + INPUT_LATENCY.
        runtime = cfg.runtime_weights
        m.submodules.weights = weights = units["weights"]
        if runtime:
            wiring.connect(m, wiring.flipped(self.load_weights), weights.load)
        m.d.comb += [weights.addr.eq(delayed(m, step.w_addr, self.INPUT_LATENCY - WeightMemory.LATENCY, "w_addr")),
                     weights.bits.eq(delayed(m, step.w_bits, self.INPUT_LATENCY - WeightMemory.LATENCY, "w_bits"))]

        m.submodules.array = array = units["array"]
        m.d.comb += [array.x.eq(x_reg), array.weights.eq(weights.weights)]

        # Accumulate at the array's output. The accumulator and bias block RAMs are read three
        # cycles ahead: their data is registered once beside them, then chosen into the
        # addend register at the adders (the block RAMs' clock-to-out and the route across
        # the chip are a cycle each). The choice is made a cycle ahead, so the sum's path into
        # the accumulator block RAM is a register, an adder and the route.
        ctrl_read = delayed(m, step, self.sum_latency - 3, "ctrl")
        ctrl_requant = delayed(m, ctrl_read, 1, "ctrl")
        ctrl_next = delayed(m, ctrl_requant, 1, "ctrl")
        ctrl = delayed(m, ctrl_next, 1, "ctrl")
        acc_mem = collision_free_memory(shape=data.ArrayLayout(signed(cfg.accumulator_bits), cols),
                                        depth=cfg.accumulator_depth, init=[])
        m.submodules.accumulators = acc_mem
        acc_wr, acc_rd = acc_mem.write_port(), acc_mem.read_port()
        m.submodules.bias = bias_mem = _bias_memory(prog)
        bias_rd = bias_mem.read_port()
        if runtime:
            self._load_into(m, bias_mem, self.load_biases)
        m.d.comb += [acc_rd.addr.eq(ctrl_read.acc_addr), bias_rd.addr.eq(ctrl_read.p_addr)]
        # (The data registers have no reset: the estimate moves them into the block RAMs'
        # output registers, hdl.tools.fpga_estimate.pack_bram_output_registers.)
        acc_near, bias_near = Signal.like(acc_rd.data, reset_less=True), Signal.like(bias_rd.data, reset_less=True)
        m.d.sync += [acc_near.eq(acc_rd.data), bias_near.eq(bias_rd.data)]
        # The next sum's addend: its bias on its first step; else the writes its read (three
        # cycles before the sum) did not see, of this cycle and the two before, the latest
        # first; else what it read.
        write_layout = data.StructLayout({"en": 1, "addr": acc_wr.addr.shape(), "data": acc_wr.data.shape()})
        written, written_before = Signal(write_layout), Signal(write_layout)
        forward, forward_before, forward_earlier = Signal(), Signal(), Signal()
        m.d.comb += [forward.eq(acc_wr.en & (acc_wr.addr == ctrl_next.acc_addr)),
                     forward_before.eq(written.en & (written.addr == ctrl_next.acc_addr)),
                     forward_earlier.eq(written_before.en & (written_before.addr == ctrl_next.acc_addr))]
        addend = Signal(data.ArrayLayout(signed(cfg.accumulator_bits), cols))
        total = Signal(data.ArrayLayout(signed(cfg.accumulator_bits), cols))
        for c in range(cols):
            with m.If(ctrl_next.first):
                m.d.sync += addend[c].eq(bias_near[c * cfg.accumulator_bits:(c + 1) * cfg.accumulator_bits].as_signed())
            with m.Elif(forward):
                m.d.sync += addend[c].eq(total[c])
            with m.Elif(forward_before):
                m.d.sync += addend[c].eq(written.data[c])
            with m.Elif(forward_earlier):
                m.d.sync += addend[c].eq(written_before.data[c])
            with m.Else():
                m.d.sync += addend[c].eq(acc_near[c])
            m.d.comb += total[c].eq(array.y[c] + addend[c])
        m.d.comb += [
            acc_wr.addr.eq(ctrl.acc_addr),
            acc_wr.data.eq(total),
            acc_wr.en.eq(ctrl.valid & ~ctrl.last),
        ]
        m.d.sync += [written.en.eq(acc_wr.en), written.addr.eq(acc_wr.addr), written.data.eq(acc_wr.data),
                     written_before.eq(written)]

        # Requantize finished sums.
        m.submodules.requant_params = requant_mem = _requant_memory(prog)
        requant_rd = requant_mem.read_port()
        if runtime:
            self._load_into(m, requant_mem, self.load_requant)
        # (Read two cycles before the sum, registered beside the memory, then at the
        # requantizer's input with the sum.)
        m.d.comb += requant_rd.addr.eq(ctrl_requant.p_addr)
        requant_near, requant_params = Signal.like(requant_rd.data, reset_less=True), Signal.like(requant_rd.data)
        m.d.sync += [requant_near.eq(requant_rd.data), requant_params.eq(requant_near)]

        m.submodules.requantizer = rq = units["requantizer"]
        acc_out = Signal.like(total)
        tag = Signal.like(rq.i_tag)
        valid = Signal()
        m.d.sync += [acc_out.eq(total), tag.addr.eq(ctrl.out_addr), tag.lane.eq(ctrl.out_lane),
                     tag.count.eq(ctrl.out_count),
                     valid.eq(ctrl.valid & ctrl.last)]
        rq_bits = self.requantizer_accumulator_bits(prog)
        sums = Signal(data.ArrayLayout(signed(rq_bits), cols))
        m.d.comb += [sums[c].eq(acc_out[c][:rq_bits]) for c in range(cols)]      # the rest is sign
        if self._splits:
            # A split op's output g is the sum of columns g * split to g * split + split - 1
            # (exact in rq_bits: the total fits them, whatever the partial sums' carries).
            split = delayed(m, ctrl.split, 1, "split")
            reduced = Signal.like(sums)
            m.d.sync += reduced.eq(sums)
            for factor in self._splits:
                with m.If(split == factor):
                    for g in range(cols // factor):
                        m.d.sync += reduced[g].eq(sum(sums[g * factor + j] for j in range(factor)))
            sums = reduced
            valid, tag = delayed(m, valid, 1, "valid"), delayed(m, tag, 1, "tag")
            requant_params = delayed(m, requant_params, 1, "requant_params")
        m.d.comb += [rq.i_valid.eq(valid), rq.i_tag.eq(tag), rq.i_params.eq(requant_params), rq.i_acc.eq(sums)]

        # Write the output's first ``count`` lanes from lane ``lane`` of word ``addr`` on:
        # an unpacked destination's tiles start at multiples of their outputs (cols, or
        # cols / split); a packed one's anywhere, into the next word.
        m.d.comb += [self.write.valid.eq(rq.o_valid), self.write.payload.addr.eq(rq.o_tag.addr)]
        per_tile = min(cols // split for split in prog.split_factors) if prog.gemm_ops else cols
        starts = range(cfg.bank_width) if self._packed else range(0, cfg.bank_width, per_tile)
        with m.Switch(rq.o_tag.lane):
            for start in starts:
                with m.Case(start):
                    # (A split op's tile starting late in a word has fewer than cols outputs.)
                    for c in range(min(cols, len(self.write.payload.lanes) - start)):
                        m.d.comb += [self.write.payload.data[start + c].eq(rq.o_data[c]),
                                     self.write.payload.lanes[start + c].eq(c < rq.o_tag.count)]
        return m
