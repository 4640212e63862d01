"""Build the torchrun command line and environment for a job (pure; no I/O)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workers import public
from workers.runtime import protocol

# Module run by torchrun for each built-in workload.
WORKLOAD_MODULES: Mapping[str, str] = {
    "tiny_gpt": "workers.workloads.tiny_gpt",
    "shapes_cnn": "workers.workloads.shapes_cnn",
    "topics_encoder": "workers.workloads.topics_encoder",
    "noop": "workers.workloads.noop",
}
# Built-ins that train nothing and run as one plain process, without torchrun (whose start-up,
# torch's import, would be most of their cost). They import only the standard library, so
# they run as a script with ``-I -S``: no site-packages and no install's import hooks, half
# the interpreter's start-up (about 9 ms of CPU instead of 19 here).
PLAIN_PROCESS = frozenset({"noop"})

# The only variables a run inherits from the worker's environment: locale, time zone, the
# program and library search paths (an interpreter or CUDA installed outside the system
# folders needs the latter) and the device/interface selection. Everything else of the
# worker (DATABASE_URL, REDIS_URL, DJANGO_SECRET_KEY, broker URLs, any SYNCLANE_ setting)
# stays out. A job's own env can set none of these (jobs.spec refuses LD_*, PATH, ...).
INHERITED_ENV = (
    "PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "GLOO_SOCKET_IFNAME",
    "CUDA_VISIBLE_DEVICES",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class GangPart:
    """One node's part of a run across ``nnodes`` nodes.

    ``endpoint`` is the c10d rendezvous (``host:port``), hosted by node rank 0's torchrun
    (``is_host``); ``run_id`` names one attempt, so an agent left from an earlier attempt
    can never join a later one. ``local_addr`` is the address other nodes reach this one
    on (torchrun's ``--local-addr``): the workers' own store lives on global rank 0's node.
    """

    nnodes: int
    node_rank: int
    nproc: int
    endpoint: str
    run_id: str
    local_addr: str
    join_timeout_s: int = 600

    def __post_init__(self) -> None:
        if self.nnodes < 2:
            raise ValueError("a run across nodes needs at least 2 nodes")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} outside 0..{self.nnodes - 1}")
        if self.nproc < 1:
            raise ValueError("nproc must be at least 1")
        host, _, port = self.endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"endpoint {self.endpoint!r} is not host:port")

    @property
    def is_host(self) -> bool:
        return self.node_rank == 0


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """What one node launches for a job: a built-in workload, or a tenant's entrypoint.

    ``redis_url`` is the run's own Redis credential (a per-job ACL user), never the
    control plane's. For tenant code, ``code_dir`` is the run's copy of the unpacked
    bundle and ``entrypoint`` the script path (or ``-m``, module) and its arguments.
    """

    job_id: int
    workload: str = ""
    world_size: int
    steps: int
    sync: str
    run_dir: Path
    redis_url: str
    checkpoint_every: int
    hyperparameters: Mapping[str, float | int] = field(default_factory=dict)
    python: str = sys.executable
    link_mbps: float | None = None
    entrypoint: tuple[str, ...] = ()
    code_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # the job's own, names checked
    # A run across nodes: this node's part of it (None: the whole run on this node).
    gang: GangPart | None = None

    def __post_init__(self) -> None:
        if self.entrypoint:
            if self.workload or self.code_dir is None:
                raise ValueError("tenant code needs code_dir and no workload")
        elif self.workload not in WORKLOAD_MODULES:
            raise ValueError(f"unknown workload {self.workload!r}")
        if self.world_size < 1:
            raise ValueError("world_size must be at least 1")
        if self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.gang is not None and self.workload in PLAIN_PROCESS:
            raise ValueError(f"{self.workload} runs as one process: it cannot span nodes")

    @property
    def nproc_per_node(self) -> int:
        """Ranks this node launches: its share of a run across nodes, else the whole world."""
        return self.gang.nproc if self.gang is not None else self.world_size

    @property
    def cwd(self) -> Path | None:
        """The folder torchrun starts in: the bundle copy for tenant code, else inherited."""
        return self.code_dir


# Hyper-parameters that map to a workload flag of the same name (underscores -> dashes).
_FLAG_PARAMS = ("lr", "batch_size", "seq_len", "eval_every", "seed")


@functools.cache
def plain_script(module: str) -> str:
    """The file of a :data:`PLAIN_PROCESS` workload's module (found, not imported)."""
    found = importlib.util.find_spec(module)
    if found is None or found.origin is None:
        raise ValueError(f"no module {module}")
    return found.origin


def build_command(spec: LaunchSpec) -> list[str]:
    """Return the argv that launches the job's ranks on this node.

    Single node, ``--standalone``: torchrun's c10d rendezvous picks a free port, so
    concurrent jobs never clash. Across nodes (``spec.gang``): ``--nnodes=N`` and a c10d
    rendezvous at node rank 0's address and published port (see ``gang_argv``), and a log
    folder of the node's own (``log_dir``).
    A :data:`PLAIN_PROCESS` workload runs as one process.
    Tenant code runs as ``torchrun ... script.py ARGS`` or ``torchrun ... -m module ARGS``
    from the bundle copy (``spec.cwd``).
    """
    if spec.workload in PLAIN_PROCESS:
        script = plain_script(WORKLOAD_MODULES[spec.workload])
        return [
            spec.python,
            "-I",
            "-S",
            script,
            f"--steps={spec.steps}",
            f"--run-dir={spec.run_dir}",
        ]
    argv = [
        spec.python,
        "-m",
        "torch.distributed.run",
        *(gang_argv(spec.gang) if spec.gang else ["--standalone", "--nnodes=1"]),
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--log-dir={log_dir(spec)}",
        "--redirects=3",
        "--tee=3",
    ]
    if spec.entrypoint:
        return [*argv, *spec.entrypoint]
    return [*argv, *_workload_argv(spec)]


def log_dir(spec: LaunchSpec) -> Path:
    """Where this node's torchrun writes its ranks' logs: ``RUN_DIR/logs`` for a run on one
    node; ``RUN_DIR/logs/node<i>`` for node rank i of a run across nodes, whose torchruns
    share the run folder (``controlplane/telemetry/logs.py`` reads them by global rank)."""
    logs = spec.run_dir / "logs"
    return logs if spec.gang is None else logs / f"node{spec.gang.node_rank}"


def gang_argv(gang: GangPart) -> list[str]:
    """torchrun's flags for one node of a run across nodes.

    ``--node-rank`` is not passed: torchrun ignores it with the c10d backend (it warns), which
    numbers the nodes itself, in the order of their addresses. Each node's supervisor reads
    the global ranks it got from its ranks (``gang.node_ranks``). ``is_host`` says which agent
    hosts the rendezvous store: on one machine every node has the same host name, and
    torchrun's guess would let whichever starts first host it. No restarts inside torchrun:
    a failed node restarts the whole run, from its checkpoint, through the supervisors.
    """
    conf = f"is_host={int(gang.is_host)},join_timeout={gang.join_timeout_s}"
    return [
        f"--nnodes={gang.nnodes}",
        "--rdzv-backend=c10d",
        f"--rdzv-id={gang.run_id}",
        f"--rdzv-endpoint={gang.endpoint}",
        f"--rdzv-conf={conf}",
        f"--local-addr={gang.local_addr}",
        "--max-restarts=0",
    ]


def _workload_argv(spec: LaunchSpec) -> list[str]:
    argv = [
        "-m",
        WORKLOAD_MODULES[spec.workload],
        f"--steps={spec.steps}",
        f"--sync={spec.sync}",
        f"--checkpoint-every={checkpoint_interval(spec)}",
        f"--run-dir={spec.run_dir}",
    ]
    for name in _FLAG_PARAMS:
        if name in spec.hyperparameters:
            argv.append(f"--{name.replace('_', '-')}={spec.hyperparameters[name]}")
    return argv


def checkpoint_interval(spec: LaunchSpec) -> int:
    """Steps between checkpoints: the job's ``checkpoint_every`` hyper-parameter, else the default."""
    return int(spec.hyperparameters.get("checkpoint_every", spec.checkpoint_every))


def build_env(spec: LaunchSpec, base: Mapping[str, str]) -> dict[str, str]:
    """Return the environment for torchrun, built from an allow-list.

    Layers, later ones winning: the INHERITED_ENV names of ``base``; the job's own env
    (names already checked by jobs.spec); what every rank needs from us. ``PYTHONPATH``
    starts with the folder that makes ``import synclane`` work in any script.
    """
    env = {name: base[name] for name in INHERITED_ENV if name in base}
    env.update(spec.env)
    env.update(
        {
            protocol.ENV_JOB_ID: str(spec.job_id),
            protocol.ENV_REDIS_URL: spec.redis_url,
            protocol.ENV_RUN_DIR: str(spec.run_dir),
            protocol.ENV_SYNC: spec.sync,
            protocol.ENV_CHECKPOINT_EVERY: str(checkpoint_interval(spec)),
            protocol.ENV_STEPS: str(spec.steps),
            # Makes ``import synclane`` work in any script; the worker's own PYTHONPATH
            # is not inherited (allow-list).
            "PYTHONPATH": public.pythonpath(),
            # One thread per rank: ranks share the node's cores.
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MASTER_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": base.get("GLOO_SOCKET_IFNAME", "lo"),
            "PYTHONUNBUFFERED": "1",
            # Caches and dot-files of libraries go to the run's own folder.
            "HOME": str(spec.run_dir),
        }
    )
    if spec.link_mbps is not None:
        env[protocol.ENV_LINK_MBPS] = str(spec.link_mbps)
    return env
