"""A failed run's reason names the rank, its exit code or signal, and its last lines."""

from __future__ import annotations

from workers.supervisor import failure

# What torchrun 2.x prints when local rank 1 is killed and rank 0 then gets SIGTERM.
TORCHRUN_LOG = """\
[default0]:tiny_gpt: 12345 params, world 2, sync full, steps 0->100
[default1]:some warning
[default0]:step 10/100 loss 3.1
[default1]:last words of rank 1
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 16030)  (SIGTERM)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_15:52:27
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 16031)  (SIGKILL)
"""


def test_it_names_the_root_cause_rank_its_signal_and_its_last_lines(tmp_path):
    (tmp_path / failure.LOG_FILE).write_text(TORCHRUN_LOG)
    reason = failure.describe(tmp_path, "torchrun exited with code 1")
    assert reason == (
        "rank 1 killed by SIGKILL; last lines: some warning | last words of rank 1 "
        "(torchrun exited with code 1)"
    )


def test_it_reads_only_the_attempt_that_failed(tmp_path):
    earlier = "Root Cause\n  rank      : 0 (local_rank: 0)\n  exitcode  : 3 (pid: 1)\n"
    (tmp_path / failure.LOG_FILE).write_text(earlier)
    mark = failure.log_size(tmp_path)
    with open(tmp_path / failure.LOG_FILE, "a") as log:
        log.write(TORCHRUN_LOG)
    assert failure.describe(tmp_path, "x", since=mark).startswith("rank 1 killed by SIGKILL")
    assert failure.describe(tmp_path, "x").startswith("rank 0 exited with code 3")


def test_without_a_root_cause_the_reason_is_kept(tmp_path):
    assert failure.describe(tmp_path, "torchrun exited with code 1") == (
        "torchrun exited with code 1"
    )
