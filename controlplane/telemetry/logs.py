"""A run's logs: tails for the API, and a follower that streams them to a job's websocket.

torchrun writes ``--log-dir=RUN_DIR/logs`` with ``--redirects=3`` as
``logs/<run id>_<suffix>/attempt_<n>/<local rank>/{stdout,stderr}.log``; the supervisor
appends torchrun's own output to ``RUN_DIR/torchrun.log``. Only the newest attempt counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TAIL_BYTES = 16_384


def tail(path: Path, *, lines: int = 40) -> list[str]:
    """Return the last ``lines`` lines of ``path`` ([] if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def latest_attempt(logs_dir: Path) -> Path | None:
    """Return the newest ``attempt_<n>`` folder under ``logs_dir``, or None."""
    attempts = [p for p in logs_dir.glob("*/attempt_*") if p.is_dir()]
    if not attempts:
        return None
    return max(attempts, key=lambda p: (p.stat().st_mtime, _attempt_no(p)))


def _attempt_no(path: Path) -> int:
    try:
        return int(path.name.split("_", 1)[1])
    except (IndexError, ValueError):
        return -1


STREAMS = ("stdout", "stderr", "torchrun")
READ_LIMIT = 65_536  # most bytes one follow-up read returns


def log_path(run_dir: Path, *, rank: int, stream: str) -> Path | None:
    """The file of one rank's stream in the newest attempt (or torchrun's log); None if none."""
    if stream == "torchrun":
        return run_dir / "torchrun.log"
    attempt = latest_attempt(run_dir / "logs")
    return None if attempt is None else attempt / str(rank) / f"{stream}.log"


def read_after(path: Path | None, offset: int, *, limit: int = READ_LIMIT) -> tuple[int, list[str]]:
    """Complete lines written after byte ``offset``; return (new offset, lines).

    A partial last line is left for the next read. An offset beyond the end means the file
    was replaced (a restart began a new attempt): reading starts again from its beginning.
    """
    if path is None:
        return offset, []
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            start = offset if offset <= size else 0
            f.seek(start)
            chunk = f.read(limit)
    except OSError:
        return offset, []
    end = chunk.rfind(b"\n") + 1
    return start + end, chunk[:end].decode("utf-8", errors="replace").splitlines()


def size_of(path: Path | None) -> int:
    """The file's size in bytes (0 when it does not exist)."""
    if path is None:
        return 0
    try:
        return path.stat().st_size
    except OSError:
        return 0


BACKLOG_LINES = 200  # lines a newly followed file starts with (the socket's bounded backlog)
BACKLOG_BYTES = 64 * 1024  # ...read from at most this far before its end


@dataclass(frozen=True)
class LogChunk:
    """New lines of one log file: ``rank`` is a rank number as text, or "torchrun"."""

    rank: str
    stream: str
    attempt: str
    lines: list[str]

    def message(self) -> dict[str, object]:
        """The websocket ``log`` message."""
        return {"type": "log", "rank": self.rank, "stream": self.stream,
                "attempt": self.attempt, "lines": self.lines}  # fmt: skip


@dataclass
class LogFollower:
    """Follows every log file of a run's newest attempt, for one websocket; reads only.

    The first ``poll`` returns the last BACKLOG_LINES lines of each file (the backlog); later
    polls return what was appended since. A file seen for the first time later (a rank that
    starts writing, a restart's new attempt) also starts from at most its last lines.
    """

    run_dir: Path
    offsets: dict[Path, int] = field(default_factory=dict)

    def poll(self) -> list[LogChunk]:
        chunks = []
        for rank, stream, attempt, path in self.files():
            if path not in self.offsets:
                self.offsets[path] = _backlog_start(path)
                offset, lines = read_after(path, self.offsets[path])
                lines = lines[-BACKLOG_LINES:]
            else:
                offset, lines = read_after(path, self.offsets[path])
            self.offsets[path] = offset
            if lines:
                chunks.append(LogChunk(rank, stream, attempt, lines))
        return chunks

    def files(self) -> list[tuple[str, str, str, Path]]:
        """(rank, stream, attempt, path) of each rank's stdout and stderr, then torchrun's."""
        found = []
        attempt = latest_attempt(self.run_dir / "logs")
        if attempt is not None:
            ranks = sorted(
                (p for p in attempt.iterdir() if p.is_dir() and p.name.isdigit()),
                key=lambda p: int(p.name),
            )
            for rank_dir in ranks:
                for stream in ("stdout", "stderr"):
                    found.append((rank_dir.name, stream, attempt.name, rank_dir / f"{stream}.log"))
        found.append(("torchrun", "torchrun", "", self.run_dir / "torchrun.log"))
        return [f for f in found if f[3].is_file()]


def _backlog_start(path: Path) -> int:
    """Where a backlog read of ``path`` starts: the line start at most BACKLOG_BYTES from its end."""
    size = size_of(path)
    if size <= BACKLOG_BYTES:
        return 0
    start = size - BACKLOG_BYTES
    try:
        with path.open("rb") as f:
            f.seek(start)
            head = f.read(BACKLOG_BYTES)
    except OSError:
        return size
    newline = head.find(b"\n")
    return size if newline < 0 else start + newline + 1
