"""Build the torchrun command line and environment for a job (pure; no I/O)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workers.runtime import protocol

# Module run by torchrun for each built-in workload.
WORKLOAD_MODULES: Mapping[str, str] = {"tiny_gpt": "workers.workloads.tiny_gpt"}


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    job_id: int
    workload: str
    world_size: int
    steps: int
    sync: str
    run_dir: Path
    redis_url: str
    checkpoint_every: int
    hyperparameters: Mapping[str, float | int] = field(default_factory=dict)
    python: str = sys.executable
    link_mbps: float | None = None

    def __post_init__(self) -> None:
        if self.workload not in WORKLOAD_MODULES:
            raise ValueError(f"unknown workload {self.workload!r}")
        if self.world_size < 1:
            raise ValueError("world_size must be at least 1")
        if self.steps < 1:
            raise ValueError("steps must be at least 1")


# Hyper-parameters that map to a workload flag of the same name (underscores -> dashes).
_FLAG_PARAMS = ("lr", "batch_size", "seq_len", "eval_every", "seed")


def build_command(spec: LaunchSpec) -> list[str]:
    """Return the argv that launches the job's ranks on this node.

    Single node, ``--standalone``: torchrun's c10d rendezvous picks a free port, so
    concurrent jobs never clash.
    """
    checkpoint_every = int(spec.hyperparameters.get("checkpoint_every", spec.checkpoint_every))
    argv = [
        spec.python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={spec.world_size}",
        f"--log-dir={spec.run_dir / 'logs'}",
        "--redirects=3",
        "--tee=3",
        "-m",
        WORKLOAD_MODULES[spec.workload],
        f"--steps={spec.steps}",
        f"--sync={spec.sync}",
        f"--checkpoint-every={checkpoint_every}",
        f"--run-dir={spec.run_dir}",
    ]
    for name in _FLAG_PARAMS:
        if name in spec.hyperparameters:
            argv.append(f"--{name.replace('_', '-')}={spec.hyperparameters[name]}")
    return argv


def build_env(spec: LaunchSpec, base: Mapping[str, str]) -> dict[str, str]:
    """Return the environment for torchrun: ``base`` plus what every rank needs."""
    env = dict(base)
    env.update(
        {
            protocol.ENV_JOB_ID: str(spec.job_id),
            protocol.ENV_REDIS_URL: spec.redis_url,
            protocol.ENV_RUN_DIR: str(spec.run_dir),
            protocol.ENV_SYNC: spec.sync,
            # One thread per rank: ranks share the node's cores.
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MASTER_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": base.get("GLOO_SOCKET_IFNAME", "lo"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if spec.link_mbps is not None:
        env[protocol.ENV_LINK_MBPS] = str(spec.link_mbps)
    return env
