"""LogFollower: what a job socket sends of a run's logs: a bounded backlog, then new lines."""

from __future__ import annotations

from pathlib import Path

from controlplane.telemetry.logs import BACKLOG_LINES, LogFollower


def rank_log(run: Path, rank: int, stream: str = "stdout", attempt: int = 0) -> Path:
    path = run / "logs" / "run_x" / f"attempt_{attempt}" / str(rank) / f"{stream}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def append(path: Path, *lines: str) -> None:
    with path.open("a") as f:
        f.writelines(f"{line}\n" for line in lines)


def test_the_first_poll_sends_only_the_last_lines_of_each_file(tmp_path: Path) -> None:
    out = rank_log(tmp_path, 0)
    append(out, *(f"line {i}" for i in range(1000)))
    err = rank_log(tmp_path, 1, "stderr")
    append(err, "Traceback (most recent call last):")
    chunks = LogFollower(tmp_path).poll()
    assert [(c.rank, c.stream, len(c.lines)) for c in chunks] == [
        ("0", "stdout", BACKLOG_LINES),
        ("1", "stderr", 1),
    ]
    assert chunks[0].lines[-1] == "line 999" and chunks[0].attempt == "attempt_0"


def test_later_polls_send_what_was_appended_and_only_whole_lines(tmp_path: Path) -> None:
    out = rank_log(tmp_path, 0)
    follower = LogFollower(tmp_path)
    append(out, "one")
    assert [c.lines for c in follower.poll()] == [["one"]]
    assert follower.poll() == []
    with out.open("a") as f:
        f.write("two\nthr")
    assert [c.lines for c in follower.poll()] == [["two"]]
    append(out, "ee")
    assert [c.lines for c in follower.poll()] == [["three"]]


def test_a_restart_is_followed_into_its_new_attempt_and_torchruns_log_too(tmp_path: Path) -> None:
    follower = LogFollower(tmp_path)
    append(rank_log(tmp_path, 0), "first attempt")
    assert [c.lines for c in follower.poll()] == [["first attempt"]]
    new = rank_log(tmp_path, 0, attempt=1)
    append(new, "second attempt")
    append(tmp_path / "torchrun.log", "restarting")
    chunks = follower.poll()
    assert [(c.rank, c.attempt, c.lines) for c in chunks] == [
        ("0", "attempt_1", ["second attempt"]),
        ("torchrun", "", ["restarting"]),
    ]
    assert chunks[0].message()["type"] == "log"


def test_a_run_without_logs_sends_nothing(tmp_path: Path) -> None:
    assert LogFollower(tmp_path / "missing").poll() == []
