"""``nki.language.dtypes``: the NKI scalar types (``nl.bfloat16`` & co.).

nki-library's harness imports this module as ``nki.dtype`` and uses its members as numpy
dtypes (``np.zeros(shape, dtype=nt.float8_e4m3)``): every NKI dtype converts to its host numpy
dtype through ``DType.dtype`` (ml_dtypes for bf16 and fp8).
"""

from nki.ir.types import BFLOAT16 as bfloat16
from nki.ir.types import BOOL as bool_
from nki.ir.types import FLOAT4_E2M1FN_X4 as float4_e2m1fn_x4
from nki.ir.types import FLOAT8_E4M3 as float8_e4m3
from nki.ir.types import FLOAT8_E4M3FN as float8_e4m3fn
from nki.ir.types import FLOAT8_E4M3FN_X4 as float8_e4m3fn_x4
from nki.ir.types import FLOAT8_E5M2 as float8_e5m2
from nki.ir.types import FLOAT8_E5M2_X4 as float8_e5m2_x4
from nki.ir.types import FLOAT8_E8M0FNU as float8_e8m0fnu
from nki.ir.types import FLOAT16 as float16
from nki.ir.types import FLOAT32 as float32
from nki.ir.types import INT8 as int8
from nki.ir.types import INT16 as int16
from nki.ir.types import INT32 as int32
from nki.ir.types import TFLOAT32 as tfloat32
from nki.ir.types import UINT8 as uint8
from nki.ir.types import UINT16 as uint16
from nki.ir.types import UINT32 as uint32
from nki.ir.types import DType

__all__ = [n for n in dir() if not n.startswith("_")]
