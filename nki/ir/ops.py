"""The IR's vocabulary: instruction opcodes, ALU operators and activation functions.

One short file, so the whole instruction set can be read at a glance. The integer values are
used in generated tables and the on-disk cache: append, never renumber.
"""

from __future__ import annotations

import enum


class Opcode(enum.IntEnum):
    """One simulator instruction family. Each has a rule (nki/lang), a reference and an
    emitter (nki/sim/emit)."""

    DMA_COPY = 1
    DMA_TRANSPOSE = 2
    TENSOR_COPY = 3
    TENSOR_TENSOR = 4
    TENSOR_SCALAR = 5
    SCALAR_TENSOR_TENSOR = 6
    TENSOR_REDUCE = 7
    TENSOR_PARTITION_REDUCE = 8
    MEMSET = 9
    IOTA = 10
    NC_MATMUL = 11
    NC_TRANSPOSE = 12
    ACTIVATION = 13
    TENSOR_SCALAR_REDUCE = 14
    AFFINE_SELECT = 15
    RANGE_SELECT = 16
    SELECT_REDUCE = 17
    TENSOR_COPY_PREDICATED = 18
    TENSOR_TENSOR_SCAN = 19
    BN_STATS = 20
    BN_AGGR = 21
    NC_STREAM_SHUFFLE = 23
    MAX8 = 24
    NC_FIND_INDEX8 = 25
    NC_MATCH_REPLACE8 = 26
    FILL_UNINIT = 27  # internal: give a fresh tile its NaN / sentinel contents
    DEVICE_PRINT = 28
    RECIPROCAL = 29
    CORE_BARRIER = 30
    SENDRECV = 31
    COLLECTIVE = 32
    RNG = 33
    QUANTIZE_MX = 34
    NC_MATMUL_MX = 35
    ACTIVATE2 = 36
    EXPONENTIAL = 37
    TENSOR_SCALAR_CUMULATIVE = 38
    SEQUENCE_BOUNDS = 39
    NONZERO_WITH_COUNT = 40
    TOPK = 41
    # registers, indirect DMA and gathers (a block of its own, so concurrent appends never
    # collide on a value)
    REGISTER_MOVE = 60
    REGISTER_LOAD = 61
    REGISTER_STORE = 62
    DMA_INDIRECT = 63
    DMA_COMPUTE = 64
    NC_N_GATHER = 65
    LOCAL_GATHER = 66
    TENSOR_GATHER = 67
    COLLECTIVE_V = 68
    PERMUTE_IMPLICIT = 69


class Engine(enum.IntEnum):
    """NKI's engine enum (values as in nki.isa.engine)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class Alu(enum.IntEnum):
    """Binary/unary ALU operators usable as ``op=`` of vector/gpsimd instructions."""

    bypass = 0
    add = 1
    subtract = 2
    multiply = 3
    divide = 4
    maximum = 5
    minimum = 6
    power = 7
    mod = 8
    fmod = 9
    abs_max = 10
    abs_min = 11
    equal = 12
    not_equal = 13
    greater = 14
    greater_equal = 15
    less = 16
    less_equal = 17
    logical_and = 18
    logical_or = 19
    logical_xor = 20
    bitwise_and = 21
    bitwise_or = 22
    bitwise_xor = 23
    left_shift = 24
    right_shift = 25
    # unary forms (operand ignored)
    abs = 26
    negative = 27
    rsqrt = 28
    reciprocal = 29
    square = 30
    relu = 31
    logical_not = 32
    invert = 33
    sqrt = 34
    sign = 35
    exp = 36
    average = 37

    @property
    def is_bitvec(self) -> bool:
        return self in _BITVEC

    @property
    def is_unary(self) -> bool:
        return self.value >= Alu.abs.value and self is not Alu.average


_BITVEC = {Alu.bitwise_and, Alu.bitwise_or, Alu.bitwise_xor, Alu.left_shift, Alu.right_shift,
           Alu.invert}


class Act(enum.IntEnum):
    """Activation functions of the Scalar engine (``nisa.activation(op=...)``)."""

    copy = 0
    exp = 1
    log = 2
    sin = 3
    cos = 4
    tan = 5
    arctan = 6
    tanh = 7
    sigmoid = 8
    relu = 9
    gelu = 10
    gelu_dx = 11
    gelu_apprx_tanh = 12
    gelu_apprx_sigmoid = 13
    gelu_apprx_sigmoid_dx = 14
    silu = 15
    silu_dx = 16
    erf = 17
    erf_dx = 18
    softplus = 19
    mish = 20
    square = 21
    sqrt = 22
    rsqrt = 23
    reciprocal = 24
    sign = 25
    abs = 26
    negative = 27
    floor = 28
    ceil = 29
    trunc = 30
    prelu = 31


class ReduceCmd(enum.IntEnum):
    """Accumulator-register commands (nki.isa.reduce_cmd)."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class LoopKind(enum.Enum):
    """How a loop was written; recorded so checks can apply the right rules."""

    AFFINE = "affine_range"
    SEQUENTIAL = "sequential_range"
    STATIC = "static_range"
    PYTHON = "range"


class DgeMode(enum.IntEnum):
    """DMA descriptor generation mode (``nki.isa.dge_mode``, current numbering)."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class OobMode(enum.IntEnum):
    """What an out-of-bounds indirect DMA access does (``nki.isa.oob_mode``)."""

    error = 0
    skip = 1


class MatmulPerfMode(enum.IntEnum):
    """``nki.isa.matmul_perf_mode``: ``double_row`` packs two fp8 rows per PE (trn2+)."""

    none = 0
    double_row = 1


class DmaEngine(enum.IntEnum):
    """Which DMA queue family ``sendrecv`` uses (``nki.isa.dma_engine``)."""

    dma = 1
    gpsimd_dma = 2
