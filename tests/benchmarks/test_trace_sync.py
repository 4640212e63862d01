"""trace_sync's ``--time``: each call of a named method is timed, then summed per step."""

from __future__ import annotations

import time
from typing import Any

import pytest
from trace_sync import time_calls, timed_calls  # this directory is on sys.path for its tests


class Strategy:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def decide(self, step: int) -> int:
        time.sleep(0.002)
        self.calls.append(step)
        return step * 2


def test_a_timed_method_still_runs_and_marks_its_duration() -> None:
    strategy = Strategy()
    events: list[tuple[str, int]] = []
    time_calls("strategy.decide", {"strategy": strategy}, lambda kind, n: events.append((kind, n)))
    assert strategy.decide(3) == 6  # the method's own result and effect
    assert strategy.calls == [3]
    ((kind, micros),) = events
    assert kind == "took strategy.decide"
    assert micros >= 2000  # it slept 2 ms


def test_a_method_of_an_attribute_is_timed_in_place() -> None:
    strategy = Strategy()
    strategy.inner = Strategy()  # type: ignore[attr-defined]
    events: list[tuple[str, int]] = []
    time_calls("strategy.inner.decide", {"strategy": strategy}, lambda *e: events.append(e))
    assert strategy.inner.decide(4) == 8  # type: ignore[attr-defined]
    assert strategy.decide(1) == 2  # the owner's own method is not wrapped
    assert [kind for kind, _ in events] == ["took strategy.inner.decide"]


def test_an_unknown_method_is_refused_with_the_name() -> None:
    with pytest.raises(SystemExit, match="--time strategy.nope: no such method"):
        time_calls("strategy.nope", {"strategy": Strategy()}, lambda *_: None)
    with pytest.raises(SystemExit, match="--time engine.submit"):
        time_calls("engine.submit", {"strategy": Strategy()}, lambda *_: None)
    with pytest.raises(SystemExit, match="--time strategy.nope.decide"):
        time_calls("strategy.nope.decide", {"strategy": Strategy()}, lambda *_: None)
    with pytest.raises(SystemExit, match="--time strategy.calls"):  # not a method
        time_calls("strategy.calls", {"strategy": Strategy()}, lambda *_: None)


def test_calls_are_summed_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    # Two steps, three calls (1 and 2 ms in the first, 9 ms in the second): 12 ms over two
    # steps, a median call of 2 ms and a mean one of 4 ms.
    steps: list[list[list[Any]]] = [
        [[0.0, "fwd", 0], [1.0, "took session._agree", 1000], [2.0, "took session._agree", 2000]],
        [[5.0, "fwd", 0], [6.0, "took session._agree", 9000]],
    ]
    timed_calls(steps)
    line = capsys.readouterr().out.strip()
    assert line == "session._agree: 6.000 ms per step, 3 calls, median 2.000 ms, mean 4.000 ms"
