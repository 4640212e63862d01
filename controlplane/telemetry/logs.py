"""A run's logs: tails for the API, and a follower that streams them to a job's websocket.

torchrun writes ``--log-dir=RUN_DIR/logs`` with ``--redirects=3`` as
``logs/<run id>_<suffix>/attempt_<n>/<local rank>/{stdout,stderr}.log``; the supervisor
appends torchrun's own output to ``RUN_DIR/torchrun.log``. Only the newest attempt counts.

A run across nodes runs one torchrun per node, all writing to the job's one run folder: node
rank i's torchrun logs to ``logs/node<i>/`` (same layout below it) and its output goes to
``torchrun.log`` (node rank 0) or ``torchrun.node<i>.log``. Its ranks are read by GLOBAL rank:
the job's placement says how many ranks each node runs, and torchrun numbers them node by
node (``controlplane.jobs.placement``), so global rank r is a local rank of one node's newest
attempt. ``nodes`` below is that count per node, () for a run on one node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.jobs.placement import torchrun_stream

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


def locate(rank: int, nodes: Sequence[int] = ()) -> tuple[int, int] | None:
    """(node rank, local rank) of global rank ``rank``; None past the placement's ranks.

    On one node (``nodes`` empty) every rank is its own local rank on node rank 0.
    """
    if not nodes:
        return 0, rank
    start = 0
    for node_rank, count in enumerate(nodes):
        if start <= rank < start + count:
            return node_rank, rank - start
        start += count
    return None


def logs_dir(run_dir: Path, node_rank: int = 0, nodes: Sequence[int] = ()) -> Path:
    """The folder node rank ``node_rank``'s torchrun logs to (``--log-dir``)."""
    return run_dir / "logs" if not nodes else run_dir / "logs" / f"node{node_rank}"


def torchrun_log(run_dir: Path, node_rank: int = 0) -> Path:
    """Node rank ``node_rank``'s torchrun output (``torchrun.log`` on one node)."""
    return run_dir / f"{torchrun_stream(node_rank)}.log"


def log_path(run_dir: Path, *, rank: int, stream: str, nodes: Sequence[int] = ()) -> Path | None:
    """The file of global rank ``rank``'s stream in its node's newest attempt; None if none.

    ``stream`` "torchrun" is the torchrun output of the node that runs ``rank``.
    """
    where = locate(rank, nodes)
    if where is None:
        return None
    node_rank, local_rank = where
    if stream == "torchrun":
        return torchrun_log(run_dir, node_rank)
    attempt = latest_attempt(logs_dir(run_dir, node_rank, nodes))
    return None if attempt is None else attempt / str(local_rank) / f"{stream}.log"


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
    """New lines of one log file: ``rank`` is a global rank as text, or a torchrun output:
    "torchrun" (the one node, or node rank 0), "torchrun.node<i>" (node rank i)."""

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
    ``nodes``: ranks per node of a run across nodes (each node's newest attempt, its ranks
    numbered globally); () for a run on one node. It may change between polls (a job admitted
    again on other nodes).
    """

    run_dir: Path
    nodes: tuple[int, ...] = ()
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
        """(rank, stream, attempt, path) of each rank's stdout and stderr by global rank, then
        each node's torchrun output."""
        found = []
        nodes, first = self.nodes, 0  # one layout per poll: the socket may replace it
        for node_rank, count in enumerate(nodes or [None]):
            attempt = latest_attempt(logs_dir(self.run_dir, node_rank, nodes))
            for local, rank_dir in _rank_dirs(attempt):
                if count is not None and local >= count:
                    continue  # an attempt of an earlier placement: not this node's ranks now
                for stream in ("stdout", "stderr"):
                    path = rank_dir / f"{stream}.log"
                    found.append((str(first + local), stream, rank_dir.parent.name, path))
            first += count or 0
        for node_rank in range(max(1, len(nodes))):
            name = torchrun_stream(node_rank)
            found.append((name, "torchrun", "", torchrun_log(self.run_dir, node_rank)))
        return [f for f in found if f[3].is_file()]


def _rank_dirs(attempt: Path | None) -> list[tuple[int, Path]]:
    """(local rank, folder) of each rank of an attempt, by local rank."""
    if attempt is None:
        return []
    try:
        dirs = [p for p in attempt.iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return []
    return sorted((int(p.name), p) for p in dirs)


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
