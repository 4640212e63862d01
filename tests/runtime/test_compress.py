"""Error-feedback compression (workers/runtime/compress.py): nothing is lost, only delayed."""

from __future__ import annotations

import pytest
import torch

from workers.runtime.compress import (
    QUANT_BLOCK,
    WIRE_DTYPES,
    ErrorFeedback,
    Int8Feedback,
    exact_parts,
    from_exact_parts,
    pack_int8,
    unpack_int8,
    wire_dtype,
)
from workers.runtime.config import COMPRESS_CHOICES


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_what_is_sent_plus_the_new_residual_is_the_input_plus_the_old_residual(
    dtype: torch.dtype,
) -> None:
    gen = torch.Generator().manual_seed(0)
    ef = ErrorFeedback(dtype)
    for _ in range(5):
        grad = torch.randn(1000, generator=gen) * 1e-3
        before = ef.residuals.get("k", torch.zeros(1000)).clone()
        low = ef.compress("k", grad)
        assert low.dtype == dtype
        # Exact: the rounding error of a shorter mantissa is representable in fp32.
        assert torch.equal(low.float() + ef.residuals["k"], grad + before)


def test_over_many_steps_the_sum_sent_converges_to_the_sum_of_inputs() -> None:
    gen = torch.Generator().manual_seed(1)
    ef = ErrorFeedback(torch.bfloat16)
    sent = torch.zeros(256, dtype=torch.float64)
    total = torch.zeros(256, dtype=torch.float64)
    for _ in range(200):
        grad = torch.randn(256, generator=gen) * 1e-4 + 3e-6  # a small bias bf16 would round off
        total += grad.double()
        sent += ef.compress("k", grad).double()
    # What is missing is exactly the residual (one rounding's worth), not 200 of them.
    torch.testing.assert_close(sent + ef.residuals["k"].double(), total, rtol=0, atol=1e-9)
    assert (sent - total).abs().max() < 1e-5
    # Without feedback the rounding errors pile up instead.
    plain = sum(g.to(torch.bfloat16).double() for g in _replay(200, 256, seed=1))
    assert (plain - total).abs().max() > (sent - total).abs().max()


def _replay(steps: int, size: int, *, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(size, generator=gen) * 1e-4 + 3e-6 for _ in range(steps)]


def test_the_input_is_left_untouched_and_a_new_shape_drops_the_residual() -> None:
    ef = ErrorFeedback(torch.bfloat16)
    grad = torch.full((4,), 1.0 + 2**-10)  # not representable in bf16
    kept = grad.clone()
    ef.compress("k", grad)
    assert torch.equal(grad, kept)
    assert ef.residuals["k"].abs().sum() > 0
    low = ef.compress("k", torch.ones(3))  # another layout under the same key
    assert torch.equal(low.float(), torch.ones(3))


def test_a_scale_applies_to_the_input_not_to_the_residual_it_joins() -> None:
    ef = ErrorFeedback(torch.bfloat16)
    delta = torch.full((4,), 3.0 + 2**-6)  # not representable in bf16
    kept = delta.clone()
    low = ef.compress("k", delta, scale=0.5)
    assert torch.equal(low.float() + ef.residuals["k"], kept * 0.5)
    before = ef.residuals["k"].clone()
    low = ef.compress("k", delta, scale=0.5)
    assert torch.equal(low.float() + ef.residuals["k"], kept * 0.5 + before)
    assert torch.equal(delta, kept)  # the residual is updated in place, the input is not
    assert torch.equal(ErrorFeedback(None).compress("k", delta, scale=0.5), kept * 0.5)


def test_without_a_dtype_tensors_pass_unchanged() -> None:
    ef = ErrorFeedback(wire_dtype("none"))
    grad = torch.randn(8)
    assert ef.compress("k", grad) is grad
    assert not ef.residuals


def test_an_unknown_wire_format_names_the_choices() -> None:
    with pytest.raises(ValueError, match="compress must be one of none, bf16, fp16, int8"):
        wire_dtype("int4")
    # The config validates against the same names without importing torch.
    assert tuple(WIRE_DTYPES) == COMPRESS_CHOICES


def test_int8_blocks_round_each_value_to_within_half_a_step_of_its_blocks_scale() -> None:
    gen = torch.Generator().manual_seed(2)
    blocks = torch.randn(4, QUANT_BLOCK, generator=gen)
    blocks[1] *= 1e-6  # a block of small values gets a scale of its own
    blocks[2] = 0.0
    packed = pack_int8(blocks)
    assert packed.dtype == torch.int8 and packed.shape == (4, QUANT_BLOCK + 4)
    decoded = unpack_int8(packed)
    step = blocks.abs().amax(dim=1, keepdim=True) / 127
    assert ((decoded - blocks).abs() <= step / 2 * (1 + 1e-5)).all()
    assert torch.equal(decoded[2], torch.zeros(QUANT_BLOCK))
    # Each block's largest value is exact up to fp32 rounding of code x scale.
    top = blocks.abs().argmax(dim=1)
    torch.testing.assert_close(decoded[0, top[0]], blocks[0, top[0]])


def test_int8_feedback_pads_to_whole_rows_and_keeps_what_rounding_left_out() -> None:
    gen = torch.Generator().manual_seed(3)
    ef = Int8Feedback()
    grad = torch.randn(1000, generator=gen)
    packed = ef.compress("k", grad, rows_multiple=3)
    # 1,000 values are 4 blocks of 256, padded to 6 rows for 3 ranks; padding decodes to 0.
    assert packed.shape[0] == 6
    assert torch.equal(unpack_int8(packed).view(-1)[1000:], torch.zeros(6 * QUANT_BLOCK - 1000))
    sent = Int8Feedback.decode(packed, 1000)
    torch.testing.assert_close(sent + ef.residuals["k"], grad, rtol=0, atol=1e-6)
    # Over many steps the sum sent approaches the sum of inputs to within one residual.
    total, sent_total = grad.double(), sent.double()
    for _ in range(100):
        grad = torch.randn(1000, generator=gen) * 1e-2 + 1e-4  # a bias under half a step
        total += grad.double()
        sent_total += Int8Feedback.decode(ef.compress("k", grad, rows_multiple=3), 1000).double()
    torch.testing.assert_close(sent_total + ef.residuals["k"].double(), total, rtol=0, atol=1e-5)
    assert (sent_total - total).abs().max() < 2e-3  # one rounding's worth, not 100


@pytest.mark.parametrize(
    ("dtype", "parts", "rel"),
    [(torch.bfloat16, 3, 2**-23), (torch.float32, 2, 2**-46), (torch.float64, 1, 0.0)],
)
def test_a_table_split_into_exact_parts_sums_back_across_ranks_that_add_zeros(
    dtype: torch.dtype, parts: int, rel: float
) -> None:
    # A table's row as a rank fills it: drift, grad norm, delay, loss, step time, rate.
    row = torch.tensor([0.0731, 3.2e4, 0.0, 2.302585, 0.00213, 1.5625e7], dtype=torch.float64)
    sent = exact_parts(row, dtype)
    assert sent is not None and sent.dtype == dtype and sent.numel() == parts * row.numel()
    # Three more ranks add their zeros in the wire's dtype, as a SUM all-reduce does.
    summed = sent + torch.zeros_like(sent) + torch.zeros_like(sent) + torch.zeros_like(sent)
    back = from_exact_parts(summed, row.numel())
    assert back.tolist() == pytest.approx(row.tolist(), rel=rel, abs=0.0)
    # One part alone would not do (bf16 keeps 8 bits, fp32 24): the later parts carry the rest.
    if parts > 1:
        assert back.tolist() != sent[: row.numel()].double().tolist()


def test_exact_parts_keep_nan_and_infinity_and_refuse_fp16() -> None:
    row = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e39], dtype=torch.float64)
    back = from_exact_parts(exact_parts(row, torch.bfloat16), row.numel())  # type: ignore[arg-type]
    assert torch.isnan(back[0])
    assert back[1:].tolist() == [float("inf"), -float("inf"), float("inf")]  # 1e39: out of range
    # fp16 tops out at 65504: a link rate in bytes a second would not fit.
    assert exact_parts(row, torch.float16) is None
