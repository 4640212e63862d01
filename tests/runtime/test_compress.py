"""Error-feedback compression (workers/runtime/compress.py): nothing is lost, only delayed."""

from __future__ import annotations

import pytest
import torch

from workers.runtime.compress import ErrorFeedback, wire_dtype


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


def test_without_a_dtype_tensors_pass_unchanged() -> None:
    ef = ErrorFeedback(wire_dtype("none"))
    grad = torch.randn(8)
    assert ef.compress("k", grad) is grad
    assert not ef.residuals


def test_an_unknown_wire_format_names_the_choices() -> None:
    with pytest.raises(ValueError, match="compress must be one of none, bf16, fp16"):
        wire_dtype("int8")
