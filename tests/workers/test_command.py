from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers import public
from workers.runtime import protocol
from workers.supervisor.command import GangPart, LaunchSpec, build_command, build_env


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


def test_every_rank_gets_the_job_checkpoint_interval():
    env = build_env(spec(hyperparameters={"checkpoint_every": 3}), {})
    assert env[protocol.ENV_CHECKPOINT_EVERY] == "3"


def test_import_synclane_works_in_a_rank_from_any_folder(tmp_path):
    """The launcher's PYTHONPATH makes the public name resolve to the runtime's real objects
    (``wrap`` the function, not the module: the lazy-package shadowing bug)."""
    env = build_env(spec(), {"PATH": os.environ["PATH"], "PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(public.IMPORT_DIR)
    # The worker's own PYTHONPATH is not inherited: the rank environment is an allow-list.
    assert "/elsewhere" not in env["PYTHONPATH"]
    code = (
        "import inspect, synclane, workers.runtime.session\n"
        "from workers.runtime import wrap\n"
        "print(inspect.isfunction(synclane.wrap), inspect.isfunction(wrap), synclane.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    is_fn, runtime_is_fn, where = out.stdout.split()
    assert is_fn == runtime_is_fn == "True"
    assert Path(where).parent.parent == public.IMPORT_DIR


def test_the_noop_workload_runs_as_one_plain_process_that_exits_cleanly(tmp_path: Path):
    argv = build_command(spec(workload="noop", python=sys.executable, run_dir=tmp_path))
    assert argv[1:3] == ["-I", "-S"] and argv[3].endswith("workers/workloads/noop.py")
    assert "torch.distributed.run" not in argv
    # Without site-packages, from a folder of its own and an empty environment: it needs
    # nothing but the standard library.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env={})
    assert done.returncode == 0, done.stderr


def code_spec(**overrides) -> LaunchSpec:
    fields = dict(
        workload="",
        entrypoint=("train.py", "--epochs", "2"),
        code_dir=Path("/runs/job-7/code"),
        env={"MY_FLAG": "1"},
    )
    return spec(**{**fields, **overrides})


def test_tenant_code_runs_its_entrypoint_after_the_torchrun_flags():
    argv = build_command(code_spec())
    assert argv[-3:] == ["train.py", "--epochs", "2"]
    assert argv[argv.index("--tee=3") + 1 :] == ["train.py", "--epochs", "2"]
    assert not any(a.startswith("--steps") for a in argv)


def test_tenant_code_may_be_a_module_and_starts_in_the_bundle_copy():
    launch = code_spec(entrypoint=("-m", "pkg.train"))
    assert build_command(launch)[-2:] == ["-m", "pkg.train"]
    assert launch.cwd == Path("/runs/job-7/code")


def test_the_rank_environment_holds_nothing_of_the_control_plane():
    worker_env = {
        "PATH": "/bin",
        "LANG": "C.UTF-8",
        "DATABASE_URL": "postgres://u:p@h/db",
        "DJANGO_SECRET_KEY": "s3cret",
        "REDIS_URL": "redis://127.0.0.1:6399/0",
        "CELERY_BROKER_URL": "redis://x",
        "SYNCLANE_STORAGE_DIR": "/srv/bundles",
        "AWS_SECRET_ACCESS_KEY": "k",
        "PYTHONPATH": "/srv/controlplane",
    }
    env = build_env(code_spec(), worker_env)
    assert {name for name in worker_env if env.get(name) == worker_env[name]} == {"PATH", "LANG"}
    assert "/srv/controlplane" not in env["PYTHONPATH"]
    assert env["MY_FLAG"] == "1"
    assert env[protocol.ENV_STEPS] == "30" and env["HOME"] == "/runs/job-7"


def test_the_jobs_env_cannot_override_what_the_supervisor_sets():
    env = build_env(code_spec(env={"OMP_NUM_THREADS": "8", protocol.ENV_JOB_ID: "1"}), {})
    assert env["OMP_NUM_THREADS"] == "1" and env[protocol.ENV_JOB_ID] == "7"


@pytest.mark.parametrize(
    "bad", [{"code_dir": None}, {"workload": "tiny_gpt"}], ids=["no code dir", "both"]
)
def test_tenant_code_needs_its_folder_and_no_workload(bad):
    with pytest.raises(ValueError):
        code_spec(**bad)


def gang_part(**overrides) -> GangPart:
    fields = dict(
        nnodes=2,
        node_rank=1,
        nproc=2,
        endpoint="10.0.0.1:29411",
        run_id="synclane-7-3-1",
        local_addr="10.0.0.2",
    )
    return GangPart(**{**fields, **overrides})


def test_a_node_of_a_run_across_nodes_joins_the_c10d_rendezvous_of_node_rank_0():
    argv = build_command(spec(world_size=4, gang=gang_part()))
    assert "--standalone" not in argv and "--nnodes=1" not in argv
    for flag in (
        "--nnodes=2",
        "--nproc-per-node=2",  # its own share of the 4 ranks
        "--rdzv-backend=c10d",
        "--rdzv-id=synclane-7-3-1",
        "--rdzv-endpoint=10.0.0.1:29411",
        "--local-addr=10.0.0.2",
        "--max-restarts=0",
    ):
        assert flag in argv, flag
    # Only node rank 0 hosts the rendezvous store: on one machine every node would match.
    assert "--rdzv-conf=is_host=0,join_timeout=600" in argv
    host = build_command(spec(world_size=4, gang=gang_part(node_rank=0, local_addr="10.0.0.1")))
    assert "--rdzv-conf=is_host=1,join_timeout=600" in host
    # torchrun flags come before the workload's.
    assert argv.index("--rdzv-backend=c10d") < argv.index("workers.workloads.tiny_gpt")


def test_each_node_of_a_run_across_nodes_logs_to_a_folder_of_its_own():
    """They share the run folder: node rank i's ranks are logs/node<i>/.../<local rank>/."""
    assert "--log-dir=/runs/job-7/logs" in build_command(spec())
    follower = build_command(spec(world_size=4, gang=gang_part()))
    host = build_command(spec(world_size=4, gang=gang_part(node_rank=0, local_addr="10.0.0.1")))
    assert "--log-dir=/runs/job-7/logs/node1" in follower
    assert "--log-dir=/runs/job-7/logs/node0" in host


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nnodes", 1, "at least 2 nodes"),
        ("node_rank", 2, "outside 0..1"),
        ("nproc", 0, "nproc"),
        ("endpoint", "10.0.0.1", "host:port"),
    ],
)
def test_a_gang_part_refuses_what_torchrun_could_not_run(field, value, message):
    with pytest.raises(ValueError, match=message):
        gang_part(**{field: value})


def test_a_one_process_workload_cannot_span_nodes():
    with pytest.raises(ValueError, match="one process"):
        spec(workload="noop", gang=gang_part())
