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

``int8`` (``Int8Feedback``) goes further for adaptive's critical gradients: blocks of
``QUANT_BLOCK`` values as int8 codes with one fp32 scale each (a quarter of fp32's bytes,
plus 1.6% for the scales), with the same error feedback. Codes cannot be summed by an
all-reduce, so the engine reduces them in two collectives (``CommEngine.submit_quantized``).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

WIRE_DTYPES: dict[str, torch.dtype | None] = {
    "none": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    # Blockwise int8 for critical gradients (Int8Feedback); what else adaptive sends (its
    # averages' deltas, steps that average everything) goes in bf16.
    "int8": torch.bfloat16,
    # bf16, and int8 for critical gradients where that saves enough link time (adaptive).
    "auto": torch.bfloat16,
}

# Values per int8 block, each block with its own fp32 scale (absmax / 127). A packed row is
# the block's codes then its scale's 4 bytes.
QUANT_BLOCK = 256
PACKED_ROW = QUANT_BLOCK + 4
# Wire bytes of blockwise int8 per fp32 byte.
INT8_SHARE = PACKED_ROW / (4 * QUANT_BLOCK)


class ErrorFeedback:
    """Per-key residuals of rounding to ``dtype`` (None: no compression, tensors pass)."""

    __slots__ = ("dtype", "residuals")

    def __init__(self, dtype: torch.dtype | None) -> None:
        self.dtype = dtype
        self.residuals: dict[Hashable, torch.Tensor] = {}

    @property
    def enabled(self) -> bool:
        return self.dtype is not None

    def compress(self, key: Hashable, tensor: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        """Return ``scale x tensor`` + the key's residual rounded to the wire dtype (a new
        tensor); keep the rounding error as the key's residual. Without a dtype, return
        ``scale x tensor`` (``tensor`` itself at scale 1).

        The residual is updated in place (one fp32 buffer per key, three passes over it):
        with a fresh buffer a call, one 410k-value delta took 907 us on one thread, against
        533 us for the same passes over a kept buffer.
        """
        if self.dtype is None:
            return tensor if scale == 1.0 else tensor.detach() * scale
        residual = self.residuals.get(key)
        if residual is None or residual.shape != tensor.shape:
            residual = tensor.detach().to(torch.float32, copy=True)
            if scale != 1.0:
                residual.mul_(scale)
            self.residuals[key] = residual
        else:
            residual.add_(tensor.detach(), alpha=scale)
        low = residual.to(self.dtype)
        # Exact in fp32: the error of rounding to a shorter mantissa is representable.
        residual.sub_(low)
        return low

    def clear(self) -> None:
        """Drop every residual (after the replicas were made identical)."""
        self.residuals.clear()


def pack_int8(blocks: torch.Tensor) -> torch.Tensor:
    """Quantize ``(rows, QUANT_BLOCK)`` fp32 values to packed ``(rows, PACKED_ROW)`` int8
    rows: round-to-nearest codes in [-127, 127] of ``value / scale``, then the scale's bytes."""
    scale = blocks.abs().amax(dim=1, keepdim=True).div_(127).clamp_min_(torch.finfo().tiny)
    codes = torch.round(blocks / scale).clamp_(-127, 127).to(torch.int8)
    return torch.cat([codes, scale.view(torch.int8)], dim=1)


def unpack_int8(packed: torch.Tensor) -> torch.Tensor:
    """The fp32 ``(rows, QUANT_BLOCK)`` values that packed rows stand for."""
    scale = packed[:, QUANT_BLOCK:].contiguous().view(torch.float32)
    return packed[:, :QUANT_BLOCK].to(torch.float32).mul_(scale)


class Int8Feedback:
    """Per-key residuals of blockwise int8 quantization (see the module docstring).

    ``compress`` pads the input with zeros to whole blocks, and to a multiple of
    ``rows_multiple`` rows (the engine splits rows evenly between ranks); padding quantizes
    to exact zeros. ``decode`` gives back the first ``numel`` values of packed rows.
    """

    __slots__ = ("residuals",)

    def __init__(self) -> None:
        self.residuals: dict[Hashable, torch.Tensor] = {}

    def compress(self, key: Hashable, tensor: torch.Tensor, *, rows_multiple: int) -> torch.Tensor:
        compensated = tensor.detach().reshape(-1).to(torch.float32, copy=True)
        residual = self.residuals.get(key)
        if residual is not None and residual.shape == compensated.shape:
            compensated.add_(residual)
        per = QUANT_BLOCK * rows_multiple
        padded = torch.nn.functional.pad(compensated, (0, -compensated.numel() % per))
        packed = pack_int8(padded.view(-1, QUANT_BLOCK))
        self.residuals[key] = compensated.sub_(self.decode(packed, compensated.numel()))
        return packed

    @staticmethod
    def decode(packed: torch.Tensor, numel: int) -> torch.Tensor:
        return unpack_int8(packed).view(-1)[:numel]

    def clear(self) -> None:
        self.residuals.clear()


def wire_dtype(name: str) -> torch.dtype | None:
    """The dtype named by the config's ``compress`` (ValueError naming the choices)."""
    try:
        return WIRE_DTYPES[name]
    except KeyError:
        raise ValueError(
            f"compress must be one of {', '.join(WIRE_DTYPES)}, got {name!r}"
        ) from None


# Parts per float64 value in ``exact_parts``: enough for fp32's 24-bit precision or better.
# fp16 has none: its range (under 65504) cannot hold a link rate in bytes per second.
_EXACT_PARTS = {torch.float64: 1, torch.float32: 2, torch.bfloat16: 3}


def exact_parts(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """``values`` (float64, 1-D) as ``parts`` values each in ``dtype``, laid out part by part
    (all first parts, then all second parts, ...), whose float64 sum gives each value back
    to fp32's precision or better (None: ``dtype`` cannot). A value out of ``dtype``'s range
    goes as infinity, and a non-finite one whole, in the first part.

    A SUM all-reduce of such parts gives the parts of the sums exactly wherever at most
    one rank's value is nonzero (the others add zeros): an agreed table, in which each rank
    fills its own row, can ride a collective in any of these dtypes (``table.TableRow``).
    """
    count = _EXACT_PARTS.get(dtype)
    if count is None:
        return None
    rest = values.to(torch.float64, copy=True)
    parts = []
    for _ in range(count):
        part = rest.to(dtype)
        widened = part.to(torch.float64)
        rest = torch.where(torch.isfinite(widened), rest - widened, 0.0)
        parts.append(part)
    return torch.cat(parts)


def from_exact_parts(parts: torch.Tensor, numel: int) -> torch.Tensor:
    """The float64 values ``exact_parts`` split into ``parts`` (``numel`` of them)."""
    return parts.to(torch.float64).view(-1, numel).sum(dim=0)
