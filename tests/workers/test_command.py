from __future__ import annotations

from pathlib import Path

import pytest

from workers.runtime import protocol
from workers.supervisor.command import LaunchSpec, build_command, build_env


def spec(**overrides) -> LaunchSpec:
    fields = dict(
        job_id=7,
        workload="tiny_gpt",
        world_size=2,
        steps=30,
        sync="full",
        run_dir=Path("/runs/job-7"),
        redis_url="redis://127.0.0.1:7000/0",
        checkpoint_every=10,
        python="/venv/bin/python",
    )
    return LaunchSpec(**{**fields, **overrides})


def test_it_runs_torchrun_standalone_with_one_process_per_rank():
    argv = build_command(spec(world_size=4))
    assert argv[:4] == ["/venv/bin/python", "-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=4" in argv
    # No fixed port: the c10d rendezvous picks a free one, so concurrent jobs never clash.
    assert not any(a.startswith("--master-port") or a.startswith("--master_port") for a in argv)


def test_it_passes_the_workload_module_and_its_flags_after_torchrun_flags():
    argv = build_command(spec())
    module_at = argv.index("workers.workloads.tiny_gpt")
    assert argv[module_at - 1] == "-m"
    assert argv[module_at + 1 :] == [
        "--steps=30",
        "--sync=full",
        "--checkpoint-every=10",
        "--run-dir=/runs/job-7",
    ]


def test_hyperparameters_become_flags_and_may_override_checkpoint_interval():
    argv = build_command(spec(hyperparameters={"lr": 0.01, "batch_size": 8, "checkpoint_every": 3}))
    assert "--lr=0.01" in argv and "--batch-size=8" in argv
    assert "--checkpoint-every=3" in argv and "--checkpoint-every=10" not in argv


def test_the_environment_tells_each_rank_its_job_and_where_to_report():
    env = build_env(spec(), {"PATH": "/bin"})
    assert env["PATH"] == "/bin"
    assert env[protocol.ENV_JOB_ID] == "7"
    assert env[protocol.ENV_REDIS_URL] == "redis://127.0.0.1:7000/0"
    assert env[protocol.ENV_RUN_DIR] == "/runs/job-7"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["GLOO_SOCKET_IFNAME"] == "lo"


@pytest.mark.parametrize("bad", [{"workload": "nope"}, {"world_size": 0}, {"steps": 0}])
def test_it_refuses_an_impossible_launch(bad):
    with pytest.raises(ValueError):
        spec(**bad)
