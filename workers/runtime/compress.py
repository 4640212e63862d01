"""Lossy wire formats with error feedback: what does not cross the link now crosses it later.

    ef = ErrorFeedback(torch.bfloat16)
    low = ef.compress("bucket 3", grad)      # send ``low``; ``grad`` is not modified
    ...                                      # all-reduce ``low`` (SUM), then .float() it

``compress`` adds the key's residual (what earlier roundings left out) to the tensor, rounds
the sum to the wire dtype and keeps the new rounding error as the residual, so that for
every key ``sum(sent) + residual == sum(inputs)`` (up to fp32 addition): nothing is lost,
only delayed (error feedback, as in 1-bit SGD / EF-SGD). A residual whose key changes shape
(the critical set changed) is dropped. Residuals are this rank's own: ranks round different
values. bf16 keeps fp32's exponent range (no underflow of small gradients), so it is the
default; fp16 has three more mantissa bits but flushes values under ~6e-8 to zero (the
residual then carries them until they add up).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

WIRE_DTYPES: dict[str, torch.dtype | None] = {
    "none": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


class ErrorFeedback:
    """Per-key residuals of rounding to ``dtype`` (None: no compression, tensors pass)."""

    __slots__ = ("dtype", "residuals")

    def __init__(self, dtype: torch.dtype | None) -> None:
        self.dtype = dtype
        self.residuals: dict[Hashable, torch.Tensor] = {}

    @property
    def enabled(self) -> bool:
        return self.dtype is not None

    def compress(self, key: Hashable, tensor: torch.Tensor) -> torch.Tensor:
        """Return ``tensor`` + the key's residual rounded to the wire dtype (a new tensor);
        keep the rounding error as the key's residual. Without a dtype, return ``tensor``."""
        if self.dtype is None:
            return tensor
        compensated = tensor.detach().to(torch.float32, copy=True)
        residual = self.residuals.get(key)
        if residual is not None and residual.shape == compensated.shape:
            compensated.add_(residual)
        low = compensated.to(self.dtype)
        # Exact in fp32: the error of rounding to a shorter mantissa is representable.
        self.residuals[key] = compensated.sub_(low.to(torch.float32))
        return low

    def clear(self) -> None:
        """Drop every residual (after the replicas were made identical)."""
        self.residuals.clear()


def wire_dtype(name: str) -> torch.dtype | None:
    """The dtype named by the config's ``compress`` (ValueError naming the choices)."""
    try:
        return WIRE_DTYPES[name]
    except KeyError:
        raise ValueError(
            f"compress must be one of {', '.join(WIRE_DTYPES)}, got {name!r}"
        ) from None
