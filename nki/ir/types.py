"""Scalar types and memory kinds of the IR.

Every NKI dtype has a small integer *code* that generated programs and the simulator's helpers
use to pick a decoder/encoder, and a *storage* numpy dtype: the bits as they sit in simulated
memory. Low-precision floats are stored as their exact bit patterns (bf16 and fp16 as uint16,
the fp8 formats as uint8) because Numba knows neither ml_dtypes nor float16.
"""

from __future__ import annotations

import enum

import ml_dtypes  # noqa: F401 - registers bfloat16/fp8 names with numpy (np.dtype(nl.bfloat16))
import numpy as np


class Kind(enum.Enum):
    """Arithmetic family of a dtype."""

    FLOAT = "float"
    INT = "int"
    UINT = "uint"
    BOOL = "bool"


class DType(str):
    """One NKI scalar type: the string of its NKI name, with the facts the simulator needs.

    Since NKI 0.6 AWS's dtypes *are* strings (``nl.float32 == "float32"``), and kernels and
    test suites rely on it: they compare with names, format them, and hand them to numpy
    (``np.zeros(s, dtype=nl.bfloat16)``: numpy reads the name, ml_dtypes defines bf16/fp8).
    ``dataclasses.asdict`` of a config holding one must leave it alone, as it leaves a
    string (nki-library's test configs do that). One instance per type: pickling and copying
    give the same object back.

    Attributes:
        name: the NKI spelling (``"bfloat16"``), also the string's value.
        code: small integer used by generated code and helpers.
        itemsize: bytes per element in simulated memory.
        storage: numpy dtype string of the stored bits.
        kind: arithmetic family.
        ml_name: ml_dtypes attribute for host-side conversion, if any.
        packed: number of logical values per stored element (x4 MX types).
    """

    name: str
    code: int
    itemsize: int
    storage: str
    kind: Kind
    ml_name: str | None
    packed: int

    def __new__(cls, name: str, code: int, itemsize: int, storage: str, kind: Kind,
                ml_name: str | None = None, packed: int = 1):
        self = super().__new__(cls, name)
        self.__dict__.update(name=name, code=code, itemsize=itemsize, storage=storage,
                             kind=kind, ml_name=ml_name, packed=packed)
        return self

    def __setattr__(self, key, value):
        raise AttributeError(f"DType {self.name} is immutable")

    def __reduce__(self):
        return (_dtype_named, (self.name,))

    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo) -> DType:
        return self

    @property
    def is_float(self) -> bool:
        return self.kind is Kind.FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind in (Kind.INT, Kind.UINT, Kind.BOOL)

    def host_dtype(self) -> np.dtype:
        """The numpy dtype a host array of this type has (ml_dtypes for bf16/fp8, the packed
        dtypes of :mod:`nki.ir.packed` for the MX x4 types)."""
        if self.packed != 1:
            from nki.ir import packed

            return packed.BY_NAME[self.name]
        if self.ml_name is not None:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, self.ml_name))
        if self.name == "tfloat32":
            return np.dtype(np.float32)
        if self.name == "bool_":
            return np.dtype(np.bool_)
        return np.dtype(self.storage if self.name != "float16" else np.float16)

    def __repr__(self) -> str:
        return self.name


def _dtype_named(name: str) -> DType:
    """The one instance of the dtype ``name`` (how a pickled DType comes back)."""
    return BY_NAME[name]


def _d(name, code, size, storage, kind, ml=None, packed=1) -> DType:
    return DType(name, code, size, storage, kind, ml, packed)


# Codes are part of the on-disk cache format: append, never renumber.
FLOAT32 = _d("float32", 0, 4, "float32", Kind.FLOAT)
BFLOAT16 = _d("bfloat16", 1, 2, "uint16", Kind.FLOAT, "bfloat16")
FLOAT16 = _d("float16", 2, 2, "uint16", Kind.FLOAT)
TFLOAT32 = _d("tfloat32", 3, 4, "float32", Kind.FLOAT)
FLOAT8_E4M3 = _d("float8_e4m3", 4, 1, "uint8", Kind.FLOAT, "float8_e4m3")
FLOAT8_E5M2 = _d("float8_e5m2", 5, 1, "uint8", Kind.FLOAT, "float8_e5m2")
FLOAT8_E4M3FN = _d("float8_e4m3fn", 6, 1, "uint8", Kind.FLOAT, "float8_e4m3fn")
INT8 = _d("int8", 7, 1, "int8", Kind.INT)
INT16 = _d("int16", 8, 2, "int16", Kind.INT)
INT32 = _d("int32", 9, 4, "int32", Kind.INT)
UINT8 = _d("uint8", 10, 1, "uint8", Kind.UINT)
UINT16 = _d("uint16", 11, 2, "uint16", Kind.UINT)
UINT32 = _d("uint32", 12, 4, "uint32", Kind.UINT)
BOOL = _d("bool_", 13, 1, "uint8", Kind.BOOL)
FLOAT8_E8M0FNU = _d("float8_e8m0fnu", 14, 1, "uint8", Kind.FLOAT, "float8_e8m0fnu")
FLOAT8_E4M3FN_X4 = _d("float8_e4m3fn_x4", 15, 4, "uint32", Kind.FLOAT, None, 4)
FLOAT8_E5M2_X4 = _d("float8_e5m2_x4", 16, 4, "uint32", Kind.FLOAT, None, 4)
FLOAT4_E2M1FN_X4 = _d("float4_e2m1fn_x4", 17, 2, "uint16", Kind.FLOAT, None, 4)

ALL_DTYPES: tuple[DType, ...] = (
    FLOAT32, BFLOAT16, FLOAT16, TFLOAT32, FLOAT8_E4M3, FLOAT8_E5M2, FLOAT8_E4M3FN,
    INT8, INT16, INT32, UINT8, UINT16, UINT32, BOOL, FLOAT8_E8M0FNU,
    FLOAT8_E4M3FN_X4, FLOAT8_E5M2_X4, FLOAT4_E2M1FN_X4,
)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
BY_CODE: dict[int, DType] = {d.code: d for d in ALL_DTYPES}
BY_NAME["bool"] = BOOL

# ``nki.dtype`` is this class, and nki-library also reads it as the module of dtypes
# (``import nki.dtype as nt; nt.float8_e4m3``): each dtype is a class attribute too.
for _d_ in ALL_DTYPES:
    type.__setattr__(DType, _d_.name, _d_)
del _d_


def from_host(dtype: np.dtype) -> DType | None:
    """The NKI dtype of a host numpy dtype, or None when NKI has no such type (float64, int64)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return BOOL
    for d in ALL_DTYPES:
        # a packed host dtype is a void dtype: equality ignores its scalar type, identity not
        if d.name != "tfloat32" and d.host_dtype() == dtype and (
                d.packed == 1 or d.host_dtype().type is dtype.type):
            return d
    return None


class Memory(enum.Enum):
    """Where a tensor lives. Values are the NKI names of the buffers."""

    SBUF = "sbuf"
    PSUM = "psum"
    PRIVATE_HBM = "private_hbm"
    SHARED_HBM = "shared_hbm"

    # on_chip / is_hbm: plain member attributes (set below), not properties: they are read
    # several times per traced operand (2.3 million times tracing a 99k-instruction matmul)
    on_chip: bool
    is_hbm: bool

    def __repr__(self) -> str:
        return self.value


for _m in Memory:
    _m.on_chip = _m in (Memory.SBUF, Memory.PSUM)
    _m.is_hbm = not _m.on_chip
del _m
