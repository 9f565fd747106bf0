"""gllm's element types, how numpy and torch dtypes map onto them, and bfloat16 helpers
(numpy has no bfloat16: gllm hands bf16 data to numpy as uint16 bit patterns)."""
from __future__ import annotations

import enum
from typing import Any


class DType(enum.IntEnum):
    """enum gllm_dtype."""
    F32 = 0
    F16 = 1
    BF16 = 2
    I32 = 3

    @property
    def itemsize(self) -> int:
        return 2 if self in (DType.F16, DType.BF16) else 4

    @property
    def numpy_name(self) -> str:
        """The numpy dtype gllm uses for this type's storage (bf16: uint16 bit patterns)."""
        return {DType.F32: "float32", DType.F16: "float16", DType.BF16: "uint16",
                DType.I32: "int32"}[self]


F32, F16, BF16, I32 = DType.F32, DType.F16, DType.BF16, DType.I32

_NAMES = {
    "f32": F32, "float32": F32, "float": F32, "fp32": F32,
    "f16": F16, "float16": F16, "half": F16, "fp16": F16,
    "bf16": BF16, "bfloat16": BF16,
    "i32": I32, "int32": I32,
    # numpy has no bfloat16: a uint16 array holds bf16 bit patterns
    "uint16": BF16,
}


def as_dtype(dtype: Any) -> DType:
    """A gllm DType from a DType, a name ("f16", "bfloat16"), a numpy dtype or type
    (np.uint16 stands for bf16) or a torch dtype."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return DType(dtype)
    if isinstance(dtype, str):
        key = dtype.lower()
    else:
        # torch.float16 prints as "torch.float16"; numpy types and dtypes have a name
        s = str(dtype)
        if s.startswith("torch."):
            key = s[len("torch."):]
        else:
            try:
                import numpy as np
                key = np.dtype(dtype).name
            except (TypeError, ImportError):
                key = s
    try:
        return _NAMES[key]
    except KeyError:
        raise TypeError(f"gllm has no dtype for {dtype!r} (float32, float16, bfloat16, int32)") \
            from None


def f32_to_bf16(x: Any) -> Any:
    """float32 values to bf16 bit patterns (numpy uint16), rounding to nearest even; NaN
    stays NaN."""
    import numpy as np
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_to_f32(bits: Any) -> Any:
    """bf16 bit patterns (uint16) to float32, exactly."""
    import numpy as np
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)
