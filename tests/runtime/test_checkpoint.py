"""The Checkpointer in one process: atomic saves, the last N kept, the newest valid one resumed."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from workers.runtime import checkpoint_files as files
from workers.runtime import protocol as p
from workers.runtime.checkpoint import Checkpointer


@pytest.fixture(autouse=True)
def restore_signal_handlers() -> Iterator[None]:
    """The Checkpointer installs SIGTERM/SIGINT handlers; give pytest its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _model_and_optimizer(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()  # some optimizer state worth restoring
    return model, optimizer


def test_it_keeps_the_last_n_checkpoints_each_with_its_digest(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    ckpt = Checkpointer(model, optimizer, run_dir=tmp_path, every=0, keep=2)
    for step in (3, 6, 9):
        ckpt.save(step)
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        "ckpt-00000006.pt",
        "ckpt-00000006.pt.sha256",
        "ckpt-00000009.pt",
        "ckpt-00000009.pt.sha256",
    ]
    assert [step for step, _ in files.valid_checkpoints(tmp_path)] == [9, 6]


def test_resume_restores_model_optimizer_and_extra_state(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer.step()
    scheduler.step()
    Checkpointer(model, optimizer, run_dir=tmp_path, extra={"scheduler": scheduler}).save(7)

    fresh, fresh_optimizer = _model_and_optimizer(1)
    fresh_scheduler = torch.optim.lr_scheduler.StepLR(fresh_optimizer, step_size=1, gamma=0.5)
    ckpt = Checkpointer(
        fresh, fresh_optimizer, run_dir=tmp_path, extra={"scheduler": fresh_scheduler}
    )
    assert ckpt.resume() == 7
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)
    assert fresh_optimizer.state_dict()["state"][0]["step"] == 2
    assert fresh_scheduler.state_dict()["last_epoch"] == 1


def test_a_fresh_run_resumes_from_step_zero(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    assert Checkpointer(model, optimizer, run_dir=tmp_path / "empty").resume() == 0


def test_a_torn_newest_checkpoint_is_skipped_by_the_run_and_the_supervisor(tmp_path: Path) -> None:
    from workers.supervisor.run import latest_checkpoint_step

    model, optimizer = _model_and_optimizer(0)
    ckpt = Checkpointer(model, optimizer, run_dir=tmp_path, keep=3)
    ckpt.save(4)
    newest = ckpt.save(8)
    newest.write_bytes(newest.read_bytes()[:100])  # torn: cut short after the digest was written
    assert latest_checkpoint_step(tmp_path) == 4
    assert Checkpointer(model, optimizer, run_dir=tmp_path).resume() == 4


def test_a_state_file_without_its_digest_does_not_count(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    Checkpointer(model, optimizer, run_dir=tmp_path).save(5)
    files.digest_path(files.checkpoint_path(tmp_path, 5)).unlink()
    assert files.latest_valid(tmp_path) is None


def test_a_checkpoint_that_does_not_load_is_skipped_with_a_warning(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    ckpt = Checkpointer(model, optimizer, run_dir=tmp_path, keep=3)
    ckpt.save(2)
    wrong = files.checkpoint_path(tmp_path, 6)
    torch.save({"step": 6, "model": {"not": torch.zeros(1)}}, wrong)  # digest ok, wrong model
    files.commit(wrong)
    with pytest.warns(UserWarning, match="skipping checkpoint ckpt-00000006.pt"):
        assert Checkpointer(model, optimizer, run_dir=tmp_path).resume() == 2


def test_step_done_saves_every_n_steps(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    ckpt = Checkpointer(model, optimizer, run_dir=tmp_path, every=5, keep=10)
    for step in range(1, 13):
        ckpt.step_done(step)
    assert [step for step, _ in files.valid_checkpoints(tmp_path)] == [10, 5]


def test_the_interval_comes_from_the_job_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(p.ENV_CHECKPOINT_EVERY, "7")
    monkeypatch.setenv(p.ENV_RUN_DIR, str(tmp_path))
    model, _ = _model_and_optimizer(0)
    ckpt = Checkpointer(model)
    assert ckpt.every == 7 and ckpt.run_dir == tmp_path


def test_sigterm_saves_the_step_writes_exit_json_and_exits_75(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    ckpt = Checkpointer(model, optimizer, run_dir=tmp_path, every=0)
    ckpt.step_done(1)
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        ckpt.step_done(2)
    assert stopped.value.code == p.EXIT_STOPPED_AFTER_CHECKPOINT
    assert files.latest_valid(tmp_path) == (2, files.checkpoint_path(tmp_path, 2))
    exit_info = json.loads((tmp_path / p.EXIT_FILE).read_text())
    assert exit_info == {
        "code": p.EXIT_STOPPED_AFTER_CHECKPOINT,
        "reason": f"signal {int(signal.SIGTERM)}",
        "step": 2,
    }


def test_an_interrupted_write_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer(0)
    ckpt = Checkpointer(model, optimizer, run_dir=tmp_path)
    ckpt.save(1)

    def crash(fh: object) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.write_atomically(files.checkpoint_path(tmp_path, 2), crash)
    assert files.latest_valid(tmp_path) == (1, files.checkpoint_path(tmp_path, 1))
    assert not [f for f in tmp_path.iterdir() if ".tmp-" in f.name]
