"""The supervisor reads a run folder its run's user owns: links and FIFOs are never read.

Tenant code may leave anything in its run folder. A FIFO named like a checkpoint, its digest,
the exit file or torchrun's log would block an ``open()`` until a writer came (the supervisor
stalls: no heartbeat, no takeover); a link to a control-plane file would have the supervisor
hash it, or quote it in a failure reason the tenant reads. Each case must return at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workers.runtime import checkpoint_files, run_files
from workers.supervisor import failure, run, takeover

from .test_failure import TORCHRUN_LOG

pytestmark = pytest.mark.django_db


def checkpoint(run_dir: Path, step: int, state: bytes) -> Path:
    """A valid checkpoint of ``step``, as the runtime writes it."""
    path = checkpoint_files.checkpoint_path(run_dir, step)
    path.write_bytes(state)
    checkpoint_files.commit(path)
    return path


def digest_line(data: bytes, name: str) -> str:
    return f"{hashlib.sha256(data).hexdigest()}  {name}\n"


def returns_within(seconds: float, call: Callable[[], Any], *fifos: Path) -> Any:
    """``call()``'s result; fails the test if it is still blocked after ``seconds``.

    A blocked call is released afterwards by opening the FIFOs for writing, so the test
    run goes on.
    """
    result: list[Any] = []

    def target() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the test's thread below
            result.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    blocked = thread.is_alive()
    for fifo in fifos:
        for _ in range(2):  # once for the open, once more if the read blocked too
            with contextlib.suppress(OSError):  # ENXIO: nobody was blocked on it
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(0.5)
    assert not blocked, f"{call} blocked on a FIFO"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


@pytest.fixture
def control_file(tmp_path: Path) -> Path:
    """A file of the control plane's, outside any run folder (a key, the database, …)."""
    path = tmp_path / "control" / "secret.key"
    path.parent.mkdir()
    path.write_bytes(b"django-insecure-the-control-planes-own-secret")
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "jobs" / "job-7"
    folder.mkdir(parents=True)
    checkpoint(folder, 20, b"real state at step 20")
    return folder


def test_a_fifo_as_the_newest_checkpoint_does_not_stall_the_supervisor(run_dir):
    fifo = checkpoint_files.checkpoint_path(run_dir, 40)
    os.mkfifo(fifo)
    checkpoint_files.digest_path(fifo).write_text(digest_line(b"", fifo.name))
    assert returns_within(5, lambda: takeover.latest_checkpoint_step(run_dir), fifo) == 20


def test_a_fifo_as_the_newest_digest_does_not_stall_the_supervisor(run_dir):
    state = checkpoint_files.checkpoint_path(run_dir, 40)
    state.write_bytes(b"state at 40")
    fifo = checkpoint_files.digest_path(state)
    os.mkfifo(fifo)
    assert returns_within(5, lambda: takeover.latest_checkpoint_step(run_dir), fifo) == 20


def test_a_link_to_a_control_plane_file_is_not_hashed_nor_resumed_from(run_dir, control_file):
    # The tenant knows (or guesses) the file's bytes and writes their digest: were the link
    # followed, the run would resume from step 40 and confirm the guess.
    link = checkpoint_files.checkpoint_path(run_dir, 40)
    link.symlink_to(control_file)
    checkpoint_files.digest_path(link).write_text(digest_line(control_file.read_bytes(), "x"))
    assert takeover.latest_checkpoint_step(run_dir) == 20


def test_a_linked_digest_is_not_read_either(run_dir, control_file):
    state = checkpoint(run_dir, 40, b"state at 40")
    digest = checkpoint_files.digest_path(state)
    real = digest.read_text()
    digest.unlink()
    control_file.write_text(real)  # a file elsewhere that happens to hold the right digest
    digest.symlink_to(control_file)
    assert takeover.latest_checkpoint_step(run_dir) == 20


def test_the_supervisor_hashes_no_more_than_its_cap(run_dir, settings):
    settings.SYNCLANE_CHECKPOINT_MAX_MB = 1
    checkpoint(run_dir, 40, b"x" * (2 * 1024 * 1024))  # valid, but over the cap
    assert takeover.latest_checkpoint_step(run_dir) == 20
    settings.SYNCLANE_CHECKPOINT_MAX_MB = 3
    assert takeover.latest_checkpoint_step(run_dir) == 40


def test_the_cap_bounds_the_search_in_all_not_each_file(tmp_path, settings):
    run_dir = tmp_path / "job-8"
    run_dir.mkdir()
    checkpoint(run_dir, 20, b"s" * (600 * 1024))  # valid
    for step in (40, 60):  # newer, each under the cap, both with a wrong digest
        path = checkpoint_files.checkpoint_path(run_dir, step)
        path.write_bytes(b"y" * (600 * 1024))
        checkpoint_files.digest_path(path).write_text(digest_line(b"other", path.name))
    settings.SYNCLANE_CHECKPOINT_MAX_MB = 1
    # Hashing 60 leaves 424 KiB of the MiB: 40 and 20 are not read, nothing counts as valid.
    assert takeover.latest_checkpoint_step(run_dir) is None
    settings.SYNCLANE_CHECKPOINT_MAX_MB = 2
    assert takeover.latest_checkpoint_step(run_dir) == 20


def test_a_fifo_or_a_link_as_the_exit_file_gives_no_reason_and_no_stall(run_dir, control_file):
    exit_file = run_dir / "exit.json"
    os.mkfifo(exit_file)
    assert returns_within(5, lambda: run.worker_exit_reason(run_dir), exit_file) is None
    exit_file.unlink()
    control_file.write_text(json.dumps({"reason": "the control plane's secret", "code": 1}))
    exit_file.symlink_to(control_file)
    assert run.worker_exit_reason(run_dir) is None


def test_a_fifo_or_a_link_as_torchruns_log_is_not_quoted(run_dir, control_file):
    log = run_dir / failure.LOG_FILE
    os.mkfifo(log)
    assert returns_within(5, lambda: failure.describe(run_dir, "exited 1"), log) == "exited 1"
    log.unlink()
    control_file.write_text(TORCHRUN_LOG)  # a file elsewhere the tenant wants quoted
    log.symlink_to(control_file)
    assert failure.describe(run_dir, "exited 1") == "exited 1"
    assert failure.log_size(run_dir) == len(str(control_file))  # the link's own size


def test_only_the_last_part_of_a_long_log_is_read(run_dir):
    log = run_dir / failure.LOG_FILE
    log.write_text("[default0]:noise\n" * 200_000 + TORCHRUN_LOG)  # ~3.4 MB, cause at the end
    assert log.stat().st_size > failure.TAIL_BYTES
    assert failure.describe(run_dir, "exited 1").startswith("rank 1 killed by SIGKILL")


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_open_regular_refuses_what_is_not_a_regular_file(tmp_path, control_file, kind):
    path = tmp_path / "f"
    {"fifo": os.mkfifo, "link": lambda p: p.symlink_to(control_file), "folder": os.mkdir}[kind](
        path
    )
    with pytest.raises(run_files.UntrustedFileError):
        returns_within(5, lambda: run_files.open_regular(path), path)


def test_read_bounded_refuses_a_file_over_its_cap(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"z" * 100)
    assert run_files.read_bounded(path, max_bytes=100) == b"z" * 100
    with pytest.raises(run_files.UntrustedFileError):
        run_files.read_bounded(path, max_bytes=99)
