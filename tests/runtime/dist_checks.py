"""Distributed checks run under a real torchrun (gloo); tests/runtime/test_dist_*.py drive them.

    torchrun --standalone --nnodes 1 --nproc-per-node 2 tests/runtime/dist_checks.py CHECK OUT.json

Each check runs on every rank; rank 0 writes a JSON result the pytest side asserts on.
One launch per check keeps torchrun's start-up cost (~3 s) to a handful per suite.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from workers.runtime.compress import Int8Feedback
from workers.runtime.config import RuntimeConfig
from workers.runtime.drift import relative_distance
from workers.runtime.engine import BACKGROUND_CHUNK_BYTES, CommEngine
from workers.runtime.health import LinkFailure
from workers.runtime.reporter import AllocationClient, Reporter
from workers.runtime.session import SynclaneDDP, wrap
from workers.runtime.stats import CommStats
from workers.runtime.strategies import COL, COLUMNS, local_step_scale
from workers.runtime.strategies import adaptive as adaptive_module
from workers.runtime.table import TableRow
from workers.runtime.throttle import TokenBucket, link_rate_fn


class Net(nn.Module):
    """~38k parameters; ``attn`` is critical for the adaptive strategy by name."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(32, 128)
        self.attn = nn.Linear(128, 128)
        self.mlp = nn.Linear(128, 128)
        self.head = nn.Linear(128, 8)

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.embed(x))
        h = h + torch.tanh(self.attn(h))
        return h + torch.tanh(self.mlp(h))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.trunk(x)), y)


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)


def fresh(net_class: type[Net] = Net) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = net_class()
    return net, torch.optim.AdamW(net.parameters(), lr=1e-2)


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    *,
    on_step: Callable[[int], None] | None = None,
) -> list[float]:
    losses = []
    for step in range(1, steps + 1):
        if on_step is not None:
            on_step(step)
        loss = model(*batch(dist.get_rank(), step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def wrapped(
    cfg: RuntimeConfig,
    *,
    net_class: type[Net] = Net,
    reporter: Reporter | None = None,
    **ddp_options: Any,
) -> tuple[SynclaneDDP, torch.optim.Optimizer]:
    net, opt = fresh(net_class)
    model = wrap(
        net,
        optimizer=opt,
        config=cfg,
        reporter=reporter or Reporter(rank=dist.get_rank()),
        **ddp_options,
    )
    return model, opt


def base_cfg(**changes: Any) -> RuntimeConfig:
    return RuntimeConfig(rank=dist.get_rank(), world_size=dist.get_world_size(), **changes)


# ---------------------------------------------------------------- checks


def check_numerics() -> dict[str, Any]:
    """full (plain; small buckets + throttled) vs plain DDP; adaptive critical grads vs full."""
    net, opt = fresh()
    plain = DistributedDataParallel(net)
    plain_losses = train(plain, opt, 5)
    plain_params = [q.detach().clone() for q in net.parameters()]

    out: dict[str, Any] = {"plain": plain_losses}
    variants = {
        "full": base_cfg(),
        "full_chunked_throttled": base_cfg(chunk_kb=64, bucket_cap_mb=0.05, link_mbps=400.0),
    }
    for name, cfg in variants.items():
        model, opt = wrapped(cfg)
        out[name] = train(model, opt, 5)
        out[name + "_params_equal"] = all(
            torch.equal(a, b) for a, b in zip(plain_params, model.module.parameters(), strict=True)
        )
        out[name + "_paced_bytes"] = model.session.pacer.granted_bytes
        model.session.close()

    # Adaptive vs full on the same state: step 1 is warm-up (full); compare step 2's grads.
    grads: dict[str, dict[str, torch.Tensor]] = {}
    for strategy in ("full", "adaptive"):
        cfg = base_cfg(sync=strategy, warmup_steps=1, compress="none", overlap_critical=False)
        model, opt = wrapped(cfg)
        train(model, opt, 1)
        loss = model(*batch(dist.get_rank(), 2))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads[strategy] = {
            n: q.grad.detach().clone()
            for n, q in model.module.named_parameters()
            if q.grad is not None
        }
        model.session.close()
    critical = [n for n in grads["full"] if n.startswith("attn.")]
    for n in critical:
        torch.testing.assert_close(grads["adaptive"][n], grads["full"][n], rtol=0, atol=0)
    out["critical_checked"] = critical
    out["noncritical_differs"] = any(
        not torch.equal(grads["adaptive"][n], grads["full"][n])
        for n in grads["full"]
        if n not in critical
    )
    return out


def check_peers() -> dict[str, Any]:
    """powersgd and localsgd run, count bytes, and localsgd re-synchronises replicas."""
    out: dict[str, Any] = {}
    for strategy in ("full", "powersgd", "localsgd", "adaptive"):
        # fp32 on the wire: the byte counts compare with full's (check_compress covers bf16);
        # adaptive's critical parameters averaged after every step (by default every second),
        # so every step carries one average.
        every_step = {"critical_period": 1} if strategy == "adaptive" else {}
        model, opt = wrapped(
            base_cfg(
                sync=strategy,
                warmup_steps=2,
                sync_period=3,
                drift_threshold=10.0,
                compress="none",
                **every_step,
            )
        )
        per_step = []
        for step in range(1, 9):
            train_one(model, opt, step)
            per_step.append(model.session.pop_step_stats()["bytes_sent"])
        params = torch.cat([q.detach().reshape(-1) for q in model.module.parameters()])
        gathered = [torch.zeros_like(params) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, params)
        out[strategy] = {
            "bytes": per_step,
            "replicas_equal": all(torch.equal(gathered[0], g) for g in gathered),
        }
        model.session.close()
    return out


class DeadLayerNet(Net):
    """``Net`` with a layer that never reaches the loss: its gradients are exactly zero."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = nn.Linear(128, 128)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.trunk(x)
        return F.cross_entropy(self.head(h + 0.0 * self.dead(h)), y)


def check_powersgd_zero_gradients() -> dict[str, Any]:
    """powersgd on a model with a layer whose gradients are all zero (a converged task or a
    branch the loss does not use): its low-rank factors must not be normalised by a zero
    norm (NaN in that layer, then in the loss)."""
    model, opt = wrapped(base_cfg(sync="powersgd", warmup_steps=2), net_class=DeadLayerNet)
    net = model.module
    losses, dead_grad_zero = [], []
    for step in range(1, 7):
        loss = model(*batch(dist.get_rank(), step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad = net.dead.weight.grad
        dead_grad_zero.append(grad is not None and not bool(grad.any()))
        opt.step()
        losses.append(float(loss))
    params = list(net.parameters())
    out = {
        "losses": losses,
        "dead_grad_zero": dead_grad_zero,
        "params_finite": all(bool(torch.isfinite(q).all()) for q in params),
        "replicas_equal": same_on_all_ranks(params),
    }
    model.session.close()
    return out


class NormNet(Net):
    """``Net`` with BatchNorm after its embedding: running statistics in buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(128)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.norm(self.embed(x)))
        h = h + torch.tanh(self.attn(h))
        return F.cross_entropy(self.head(h + torch.tanh(self.mlp(h))), y)


def check_buffers() -> dict[str, Any]:
    """Who broadcasts buffers: DDP's broadcast of rank 0's at every forward under full (and
    under adaptive when asked for); each rank's own under adaptive and none, averaged with
    the parameters by adaptive's synchronize()."""
    out: dict[str, Any] = {}
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("full", "full", {}),
        ("none", "none", {}),
        ("adaptive", "adaptive", {}),
        ("adaptive_broadcast", "adaptive", {"broadcast_buffers": True}),
    ]
    for name, sync, ddp_options in cases:
        model, opt = wrapped(base_cfg(sync=sync, warmup_steps=2), net_class=NormNet, **ddp_options)
        net = model.module
        train(model, opt, 5)
        # DDP broadcasts before a forward, which in training mode then updates the
        # statistics with this rank's batch: look after an evaluating one.
        model.eval()
        with torch.no_grad():
            model(*batch(dist.get_rank(), 6))
        model.train()
        stats = [net.norm.running_mean, net.norm.running_var]
        case: dict[str, Any] = {
            "buffers_equal": same_on_all_ranks(stats),
            "count_equal": same_on_all_ranks([net.norm.num_batches_tracked.double()]),
        }
        if sync == "adaptive":
            mean = [t.detach().clone() for t in stats]
            for t in mean:
                dist.all_reduce(t)
                t.div_(dist.get_world_size())
            model.session.synchronize()
            case["synced_equal"] = same_on_all_ranks(stats)
            case["synced_is_mean"] = all(
                torch.allclose(t, m, rtol=0, atol=1e-6) for t, m in zip(stats, mean, strict=True)
            )
        out[name] = case
        model.session.close()
    return out


def train_one(
    model: nn.Module, opt: torch.optim.Optimizer, step: int, *, rank: int | None = None
) -> float:
    """One step on ``rank``'s batch (None: this rank's)."""
    loss = model(*batch(dist.get_rank() if rank is None else rank, step))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss)


def train_until_link_failure(
    model: SynclaneDDP, opt: torch.optim.Optimizer, steps: int, figure: str
) -> tuple[list[float], list[float], int | None]:
    """Train steps 1..``steps``; return losses, one step figure per step, the failed step."""
    losses, figures = [], []
    for step in range(1, steps + 1):
        try:
            losses.append(train_one(model, opt, step))
        except LinkFailure:
            return losses, figures, step
        figures.append(model.session.pop_step_stats()[figure])
    return losses, figures, None


def link_paced_at(mbps: float) -> TokenBucket:
    """A token bucket at an emulated link of ``mbps`` (no allocation, no fault)."""
    return TokenBucket(
        link_rate_fn(link_mbps=mbps, allocation_bps=lambda: None, fault_factor=lambda: 1.0)
    )


def check_throttle() -> dict[str, Any]:
    """Achieved wire rate of paced all-reduces at 3 rates, then a live allocation change."""
    group = dist.new_group()
    out: dict[str, Any] = {}
    world = dist.get_world_size()
    tensor = torch.ones(64 * 1024)  # 256 KiB payload
    for mbps in (50.0, 100.0, 200.0):
        engine = CommEngine(
            group=group,
            pacer=link_paced_at(mbps),
            stats=CommStats(),
            rank=dist.get_rank(),
            chunk_bytes=1 << 20,
        )
        out[str(int(mbps))] = achieved_bps(engine, tensor, count=int(mbps // 5)) / (mbps * 1e6)
        engine.close()

    # Live: the control plane changes the allocation while the run goes.
    cfg = RuntimeConfig.from_env()
    alloc = AllocationClient(redis_url=cfg.redis_url, job_id=cfg.job_id, refresh_s=0.2).start()
    pacer = TokenBucket(
        link_rate_fn(link_mbps=None, allocation_bps=alloc.current_bps, fault_factor=lambda: 1.0)
    )
    engine = CommEngine(group=group, pacer=pacer, stats=CommStats(), rank=dist.get_rank())
    live = []
    for bps in (40_000_000, 160_000_000):
        dist.barrier()
        if dist.get_rank() == 0:
            import redis

            r = redis.Redis.from_url(str(cfg.redis_url))
            r.set(f"synclane:alloc:{cfg.job_id}", bps)
            r.publish(f"synclane:alloc:{cfg.job_id}:nudge", bps)
        deadline = time.monotonic() + 5
        while alloc.current_bps() != bps and time.monotonic() < deadline:
            time.sleep(0.02)
        dist.barrier()
        live.append(achieved_bps(engine, tensor, count=bps // 5_000_000) / bps)
    out["live"] = live
    engine.close()
    alloc.close()
    out["world"] = world
    return out


def achieved_bps(engine: CommEngine, tensor: torch.Tensor, *, count: int) -> float:
    dist.barrier()
    engine.allreduce(tensor.clone())  # settle the bucket: measure steady state
    # Queue every transfer up front, as a step's buckets are: the rate is then the pacer's,
    # not this loop's hand-off latency between one transfer's end and the next submit.
    start_bytes = engine.pacer.granted_bytes
    t0 = time.perf_counter()
    futures = [engine.submit(tensor.clone(), flush=True) for _ in range(count)]
    for fut in futures:
        fut.wait()
    elapsed = time.perf_counter() - t0
    return (engine.pacer.granted_bytes - start_bytes) * 8 / elapsed


def check_drift() -> dict[str, Any]:
    """Rank 1's LR spikes at step 12; the sync_drift alarm fires, enhancement, then clears.
    Critical parameters averaged after every step, so a table is agreed after every step."""
    return _drift_trail(spike_at=12, critical_period=1)


def check_drift_every_second() -> dict[str, Any]:
    """As check_drift with the default: critical averages, and tables, every second step;
    the spike at step 14, which starts no periodic average (12 and 18 do)."""
    return _drift_trail(spike_at=14)


def _drift_trail(*, spike_at: int, **changes: Any) -> dict[str, Any]:
    cfg = RuntimeConfig.from_env(
        sync="adaptive", warmup_steps=2, sync_period=4, drift_threshold=0.5, **changes
    )
    reporter = Reporter.from_env(cfg)
    model, opt = wrapped(cfg, reporter=reporter)
    base_lr = opt.param_groups[0]["lr"]

    def spike(step: int) -> None:
        lr = base_lr * 300 if (step == spike_at and dist.get_rank() == 1) else base_lr
        for g in opt.param_groups:
            g["lr"] = lr

    strategy = model.session.strategy
    launches: list[int] = []  # the steps at which an average of the replicas started
    launch_sync = strategy._launch_sync  # type: ignore[attr-defined]

    def record_launch(at: int, *, lag: int) -> None:
        launches.append(at)
        launch_sync(at, lag=lag)

    strategy._launch_sync = record_launch  # type: ignore[attr-defined]
    trail = []
    for step in range(1, 25):
        spike(step)
        train_one(model, opt, step)
        f = model.session.pop_step_stats()
        trail.append(
            {
                "step": step,
                "drift": f.get("drift", 0.0),
                "enhanced": f.get("sync_enhanced", 0.0),
                "period": f.get("sync_period", 0.0),
            }
        )
    out = {
        "trail": trail,
        "launches": launches,
        "raised": strategy.drift.alarms_raised,  # type: ignore[attr-defined]
        "cleared": strategy.drift.alarms_cleared,  # type: ignore[attr-defined]
    }
    model.session.close()
    reporter.close()
    return out


def check_agree_cadence() -> dict[str, Any]:
    """The steps at which adaptive's ranks agree a table, what this rank's row holds, how
    each table went (alone, or riding the critical average) and what arrived: every step
    in warm-up, then every second step (the default critical period)."""
    model, opt = wrapped(base_cfg(sync="adaptive", warmup_steps=2))
    session = model.session
    rows: list[tuple[int, list[float]]] = []
    outgoing_rows: list[TableRow] = []
    arrived: list[tuple[int, list[list[float]]]] = []  # (the step it is of, the table)
    agree = session._agree

    def record(outgoing: TableRow) -> Any:
        rows.append((session.step, outgoing.table[session.rank].tolist()))
        outgoing_rows.append(outgoing)
        table, measured = agree(outgoing)
        if table is not None:
            arrived.append((measured, table.tolist()))
        return table, measured

    session._agree = record  # type: ignore[method-assign]
    losses = [train_one(model, opt, step) for step in range(1, 11)]
    sent: list[list[tuple[int, list[float]]]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(sent, rows)  # every rank's rows, to compare with what arrived
    out = {
        "agreed_at": [step for step, _ in rows],
        "rode_at": [row.step for row in outgoing_rows if row.rode],
        "alone_at": [row.step for row in outgoing_rows if row.alone],
        "losses": losses,
        "row_losses": [row[COL["loss"]] for _, row in rows],
        "row_step_times": [row[COL["step_time_s"]] for _, row in rows],
        "arrived": arrived,
        "sent": [dict(rank_rows) for rank_rows in sent],
    }
    model.session.close()
    return out


def check_drift_together() -> dict[str, Any]:
    """Both ranks train on the same batches: their replicas move alike, apart by nothing.

    Per step: the drift adaptive reports and how far the non-critical parameters moved from
    their last synced copy (relative, the worst rank's).
    """
    # A table after every step (critical parameters averaged after every step): a row per step.
    cfg = base_cfg(
        sync="adaptive", warmup_steps=2, sync_period=4, drift_threshold=0.1, critical_period=1
    )
    model, opt = wrapped(cfg)
    strategy = model.session.strategy
    rows = []
    for step in range(1, 25):
        train_one(model, opt, step, rank=0)  # rank 0's batch on every rank
        figures = model.session.pop_step_stats()
        noncritical = strategy.noncritical_params()  # type: ignore[attr-defined]
        moved = 0.0
        if noncritical and not strategy.state.sync_all:  # type: ignore[attr-defined]
            now = torch.cat([q.detach().reshape(-1) for q in noncritical])
            synced = torch.cat([strategy.synced[n] for n in strategy.noncritical])  # type: ignore[attr-defined]
            moved = relative_distance(now, synced)
        worst = torch.tensor([moved])
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        rows.append({"step": step, "drift": figures["drift"], "moved": float(worst)})
    out = {"rows": rows, "raised": strategy.drift.alarms_raised}  # type: ignore[attr-defined]
    model.session.close()
    return out


def check_fault() -> dict[str, Any]:
    """A delay injected on rank 1 from step 3 raises link_degraded, shrinks chunks, escalates.

    A table after every step (``table_interval_s`` 0), so the ladder is followed step by
    step from the first slow one (``check_table_cadence`` covers the default cadence).
    """
    cfg = RuntimeConfig.from_env(
        sync="full",
        fault="rank=1,from_step=3,delay_s=0.15",
        jitter_threshold_s=0.1,
        chunk_kb=256,
        table_interval_s=0.0,
    )
    reporter = Reporter.from_env(cfg)
    model, opt = wrapped(cfg, reporter=reporter)
    _, chunks, failed_at = train_until_link_failure(model, opt, 19, "chunk_bytes")
    failed = torch.tensor([failed_at or -1])
    everyone = [torch.zeros_like(failed) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, failed)
    out = {"failed_at": [int(t) for t in everyone], "chunks": chunks}
    model.session.close()
    reporter.close()
    return out


def check_table_cadence() -> dict[str, Any]:
    """The agreed table's cadence under full: the steps that agreed one, healthy (the
    default 0.25 s threshold), and with a delay injected on rank 1 from step 5 (threshold
    0.1 s) until the link escalates.

    ``table_interval_s`` 10 s: any step of this model is far shorter, so once a step time
    is agreed (the table of step 1, read at step 2) the cadence is the cap, 8 steps.
    """
    out: dict[str, Any] = {}
    runs = (("healthy", None, 0.25), ("degraded", "rank=1,from_step=5,delay_s=0.15", 0.1))
    for label, fault, threshold in runs:
        cfg = RuntimeConfig.from_env(
            sync="full", fault=fault, jitter_threshold_s=threshold, table_interval_s=10.0
        )
        if cfg.job_id is not None:
            cfg = cfg.with_(job_id=f"{cfg.job_id}-{label}")
        reporter = Reporter.from_env(cfg)
        model, opt = wrapped(cfg, reporter=reporter)
        agreed, failed_at = [], None
        for step in range(1, 33):
            try:
                train_one(model, opt, step)
            except LinkFailure:
                failed_at = step
                break
            if model.session.strategy.last_table == step:
                agreed.append(step)
        out[label] = {"agreed": agreed, "failed_at": failed_at}
        model.session.close()
        reporter.close()
    return out


def check_spike() -> dict[str, Any]:
    """One slow step (rank 1's collectives 0.5 s late at step 3 only), threshold 0.1 s; a
    table after every step, so the jitter follows each step."""
    cfg = RuntimeConfig.from_env(
        sync="full",
        fault="rank=1,from_step=3,until_step=4,delay_s=0.5",
        jitter_threshold_s=0.1,
        table_interval_s=0.0,
    )
    reporter = Reporter.from_env(cfg)
    model, opt = wrapped(cfg, reporter=reporter)
    _, jitter, failed_at = train_until_link_failure(model, opt, 12, "jitter_s")
    model.session.close()
    reporter.close()
    return {"failed_at": failed_at, "jitter": jitter}


def check_reissue() -> dict[str, Any]:
    """A blip on full sync: rank 1's first attempts are 0.2 s late for 10 steps (3 to 12).

    Three runs from the same seeds: no fault; the blip with re-issue (the default: after
    the 0.1 s jitter threshold); the blip with re-issue off (``reissue_after_s=0``). A table
    after every step (``table_interval_s`` 0): the link monitor sees the blip's first step.
    """
    fault = "rank=1,from_step=3,until_step=13,delay_s=0.2,blip=1"
    clean_model, clean_opt = wrapped(base_cfg(sync="full", chunk_kb=64))
    clean = [train_one(clean_model, clean_opt, step) for step in range(1, 21)]
    clean_model.session.close()
    out: dict[str, Any] = {"clean": clean}
    for label, after in (("on", None), ("off", 0.0)):
        cfg = RuntimeConfig.from_env(
            sync="full",
            fault=fault,
            jitter_threshold_s=0.1,
            chunk_kb=64,
            reissue_after_s=after,
            table_interval_s=0.0,
        )
        if cfg.job_id is not None:
            cfg = cfg.with_(job_id=f"{cfg.job_id}-{label}")
        reporter = Reporter.from_env(cfg)
        model, opt = wrapped(cfg, reporter=reporter)
        losses, reissued, failed_at = train_until_link_failure(model, opt, 20, "reissued")
        params = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
        everyone = [torch.zeros_like(params) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, params)
        out[label] = {
            "losses": losses,
            "reissued": reissued,
            "failed_at": failed_at,
            "replicas_equal": all(torch.equal(everyone[0], t) for t in everyone),
        }
        model.session.close()
        reporter.close()
    # Adaptive's critical buckets go through the same path (warm-up 2 steps, then selective).
    cfg = base_cfg(
        sync="adaptive", fault=fault, jitter_threshold_s=0.1, warmup_steps=2, overlap_critical=False
    )
    model, opt = wrapped(cfg)
    _, reissued, failed_at = train_until_link_failure(model, opt, 20, "reissued")
    attn = torch.cat([model.module.attn.weight.detach().reshape(-1), model.module.attn.bias])
    everyone = [torch.zeros_like(attn) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, attn.detach())
    out["adaptive"] = {
        "failed_at": failed_at,
        "reissued": reissued,
        "critical_equal": all(torch.equal(everyone[0], t) for t in everyone),
    }
    model.session.close()
    return out


def check_probes() -> dict[str, Any]:
    """Probes every 2 steps on a 100 Mbit/s emulated link; rank 1 turns slow from step 4.

    ``SYNCLANE_FAULT`` replaces that fault (e.g. with a blip).
    """
    cfg = RuntimeConfig.from_env(probe_every=2, link_mbps=100.0, jitter_threshold_s=0.02)
    if cfg.fault is None:  # SYNCLANE_FAULT may give another one
        cfg = replace(cfg, fault="rank=1,from_step=4,delay_s=0.06")
    reporter = Reporter.from_env(cfg)
    model, opt = wrapped(cfg, reporter=reporter)
    for step in range(1, 5):
        train_one(model, opt, step)
    out = {"links": [vars(s) for s in model.session.links]}
    model.session.close()
    reporter.close()
    return out


def check_local_step_scale() -> dict[str, Any]:
    """Adaptive's local steps, with and without the automatic scale.

    Runs from the same state and batches: warm-up step 1 (full), then step 2, the first
    selective one, whose updates are compared with an unscaled run's. With critical
    gradients averaged in backward (``overlap_critical`` off) the updates must agree on
    critical params and differ by 2^0.8 (AdamW) on non-critical ones; by default critical
    params take local steps too, scaled by 2^0.5 (the average started after step 1 is of
    identical replicas, so it moves nothing at step 2).
    """
    deltas: dict[str, dict[str, torch.Tensor]] = {}
    scales: dict[str, tuple[float, float]] = {}
    # The learning rate the optimizer stepped with at step 2 (a pre-step hook registered
    # after wrap's runs after adaptive's), and the one its group holds after the step.
    lrs: dict[str, tuple[float, float]] = {}
    runs = [
        (f"{mode}_{name}", overlap, scale)
        for mode, overlap in (("grad", False), ("overlap", True))
        for name, scale in (("auto", None), ("unscaled", 1.0))
    ]
    for name, overlap, scale in runs:
        model, opt = wrapped(
            base_cfg(
                sync="adaptive",
                warmup_steps=1,
                drift_threshold=10.0,
                local_step_scale=scale,
                overlap_critical=overlap,
            )
        )
        train_one(model, opt, 1)
        before = {n: q.detach().clone() for n, q in model.module.named_parameters()}
        stepped_with: list[float] = []
        opt.register_step_pre_hook(
            lambda o, *_, seen=stepped_with: seen.append(o.param_groups[0]["lr"])
        )
        train_one(model, opt, 2)
        lrs[name] = (stepped_with[0], opt.param_groups[0]["lr"])
        deltas[name] = {n: q.detach() - before[n] for n, q in model.module.named_parameters()}
        strategy = model.session.strategy
        scales[name] = (strategy.step_scale, strategy.critical_step_scale)  # type: ignore[attr-defined]
        model.session.close()

    def ratios(mode: str, critical: bool) -> dict[str, float]:
        auto, unscaled = deltas[f"{mode}_auto"], deltas[f"{mode}_unscaled"]
        return {
            n: float(auto[n].norm() / unscaled[n].norm())
            for n in auto
            if n.startswith("attn.") == critical
        }

    grad_auto, grad_unscaled = deltas["grad_auto"], deltas["grad_unscaled"]
    return {
        "scale": scales["grad_auto"][0],
        "critical_scale": scales["overlap_auto"][1],
        "critical_equal": all(
            torch.equal(grad_auto[n], grad_unscaled[n]) for n in grad_auto if n.startswith("attn.")
        ),
        "noncritical_ratios": ratios("grad", critical=False),
        "overlap_noncritical_ratios": ratios("overlap", critical=False),
        "overlap_critical_ratios": ratios("overlap", critical=True),
        "lr": opt.defaults["lr"],
        "lrs": lrs,
        "critical_numel": sum(
            q.numel() for n, q in Net().named_parameters() if n.startswith("attn.")
        ),
        "numel": sum(q.numel() for q in Net().parameters()),
        "sgd_scale": local_step_scale(
            base_cfg(sync="adaptive"), torch.optim.SGD(Net().parameters(), lr=0.1), 2
        ),
    }


def check_fast_link() -> dict[str, Any]:
    """Adaptive syncs everything while the link is cheap relative to the step, then not.

    200 Mbit/s: full sync of Net's 152 KB takes ~6 ms. Steps 1-8 take 60 ms more (the share
    of full sync is < 0.2: fast-link mode from the end of the 2 warm-up steps, which the
    figures of step 2 show); steps 9-20 do not
    (share > 0.3: selective sync again once most of the last 9 steps were quick), except
    step 17, as if the script evaluated before it: one slow step changes nothing.
    """
    # fp32 on the wire: the byte counts compare with full's (check_compress covers bf16). A
    # table after every step (table_interval_s 0): the mode follows the steps one by one.
    model, opt = wrapped(
        base_cfg(
            sync="adaptive",
            warmup_steps=2,
            link_mbps=200.0,
            drift_threshold=10.0,
            compress="none",
            table_interval_s=0.0,
        )
    )
    steps = []
    slow = {"step": 0}

    def compute_slowly(_module: nn.Module, _inputs: Any) -> None:
        if slow["step"] <= 8 or slow["step"] == 17:
            time.sleep(0.06)  # in the forward: part of the step, the first one's too

    model.module.register_forward_pre_hook(compute_slowly)
    for step in range(1, 21):
        slow["step"] = step
        train_one(model, opt, step)
        figures = model.session.pop_step_stats()
        params = torch.cat([q.detach().reshape(-1) for q in model.module.parameters()])
        gathered = [torch.zeros_like(params) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, params)
        steps.append(
            {
                "fast_link": figures["fast_link"],
                "bytes": figures["bytes_sent"],
                "collectives": figures["collectives"],
                "replicas_equal": all(torch.equal(gathered[0], g) for g in gathered),
            }
        )
    model.session.close()
    return {"steps": steps, "figure_names": sorted(figures)}


def lanes(
    pacer: TokenBucket, fg_stats: CommStats, bg_stats: CommStats, *, gated: bool
) -> tuple[CommEngine, CommEngine]:
    """A foreground engine and a background lane on one link, as the session builds them
    (``gated``: the lane yields to the foreground; False only as a test's contrast)."""
    fg = CommEngine(group=dist.new_group(), pacer=pacer, stats=fg_stats, rank=dist.get_rank())
    bg = CommEngine(
        group=dist.new_group(),
        pacer=pacer,
        stats=bg_stats,
        rank=dist.get_rank(),
        chunk_bytes=BACKGROUND_CHUNK_BYTES,
        yield_to=fg.wait_until_idle if gated else None,
    )
    dist.barrier()
    return fg, bg


def check_background_lane() -> dict[str, Any]:
    """A background transfer yields the (paced) link to foreground gradients.

    At 20 Mbit/s a 320 KiB background average needs ~130 ms of link and a 32 KiB gradient
    ~13 ms. The background starts first; the gradient, submitted 5 ms later, must not
    queue behind all of it (FIFO: ~145 ms), only behind the background chunk in flight.
    """
    fg, bg = lanes(link_paced_at(20.0), CommStats(), CommStats(), gated=True)
    average = torch.full((80 * 1024,), float(dist.get_rank() + 1))
    gradient = torch.full((8 * 1024,), float(dist.get_rank() + 1))
    start = time.perf_counter()
    bg_future = bg.submit(average, flush=True)
    time.sleep(0.005)
    fg_future = fg.submit(gradient, flush=True)
    fg_future.wait()
    fg_s = time.perf_counter() - start
    bg_future.wait()
    bg_s = time.perf_counter() - start
    expected = float(sum(range(1, dist.get_world_size() + 1)))
    out = {
        "foreground_s": fg_s,
        "background_s": bg_s,
        "sums_correct": bool((average == expected).all() and (gradient == expected).all()),
    }
    fg.close()
    bg.close()
    return out


class LaunchLog(CommStats):
    """CommStats that also keeps every collective's launch time."""

    def __init__(self) -> None:
        super().__init__()
        self.launches: list[float] = []

    def launched(self) -> float:
        now = super().launched()
        self.launches.append(now)
        return now


def check_lane_gating() -> dict[str, Any]:
    """The background lane starts no chunk while the foreground still holds the link.

    At 20 Mbit/s a 64 KiB gradient occupies the link ~26 ms. A background average submitted
    right after it must launch its first collective only once that slot ended; the same
    lane without ``yield_to`` (the contrast) launches at once, beside the gradient.
    """
    pacer = link_paced_at(20.0)
    out: dict[str, Any] = {}
    for gated in (True, False):
        fg_stats, bg_stats = CommStats(), LaunchLog()
        fg, bg = lanes(pacer, fg_stats, bg_stats, gated=gated)
        gradient = torch.ones(16 * 1024)
        fg_future = fg.submit(gradient, flush=True)
        bg_future = bg.submit(torch.ones(32 * 1024), flush=True)
        fg_future.wait()
        bg_future.wait()
        fg_done = fg_stats.last_done()
        assert fg_done is not None
        out["gated" if gated else "ungated"] = {
            "first_bg_launch_after_fg_done_s": bg_stats.launches[0] - fg_done,
        }
        fg.close()
        bg.close()
        time.sleep(pacer.busy_for())  # the next case starts on an idle link
    return out


def check_lane_chunks() -> dict[str, Any]:
    """A transfer's own chunk size (``submit``'s ``chunk_bytes``) wins over the lane's.

    A 320 KiB average goes in the lane's 64 KiB chunks (5 collectives), then with 256 KiB
    chunks of its own (2), then in the lane's again: the size is the transfer's, not a
    setting it leaves behind.
    """
    bg_stats = CommStats()
    fg, bg = lanes(link_paced_at(10_000.0), CommStats(), bg_stats, gated=True)
    expected = float(sum(range(1, dist.get_world_size() + 1)))
    out: dict[str, Any] = {"collectives": [], "sums_correct": True}
    for chunk_bytes in (None, 256 * 1024, None):
        average = torch.full((80 * 1024,), float(dist.get_rank() + 1))
        bg.submit(average, flush=True, chunk_bytes=chunk_bytes).wait()
        out["collectives"].append(bg_stats.pop()["collectives"])
        out["sums_correct"] = out["sums_correct"] and bool((average == expected).all())
    fg.close()
    bg.close()
    return out


def check_promotion() -> dict[str, Any]:
    """Score-based promotion: which parameters are critical at each step, and are they equal.

    Adaptive syncs non-critical parameters every 2 steps; with a 10% promotion budget, a
    parameter that moves more than ``PROMOTION_THRESHOLD`` of the drift threshold between
    syncs is promoted if it fits the budget (Net: the biases and ``head.weight``;
    ``embed.weight`` and ``mlp.weight`` are too large). From step 25 the learning rate is 0:
    nothing moves, so the promoted parameters are demoted. The same run with the default
    budget (0) is the ``default`` entry.
    """
    out = _promotion_run(promotion_budget=0.1)
    out["default"] = _promotion_run()
    return out


def _promotion_run(**changes: Any) -> dict[str, Any]:
    cfg = base_cfg(
        sync="adaptive", warmup_steps=2, sync_period=2, overlap_critical=False, **changes
    )
    model, opt = wrapped(cfg)
    strategy = model.session.strategy
    averaged = []
    average_state = strategy._average_optimizer_state  # type: ignore[attr-defined]

    def counting(names: set[str]) -> None:
        averaged.append(sorted(names))
        average_state(names)

    strategy._average_optimizer_state = counting  # type: ignore[attr-defined]
    steps = []
    for step in range(1, 41):
        if step == 25:
            for group in opt.param_groups:
                group["lr"] = 0.0
        train_one(model, opt, step)
        promoted = sorted(strategy.critical_names - strategy.base_critical)  # type: ignore[attr-defined]
        by_name = dict(model.module.named_parameters())
        flat = _flat_named(by_name, promoted)
        gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, flat)
        steps.append(
            {
                "promoted": promoted,
                "promoted_equal": all(torch.equal(gathered[0], g) for g in gathered),
            }
        )
    model.session.close()
    return {"steps": steps, "state_averages": averaged}


def _flat_named(by_name: dict[str, nn.Parameter], names: list[str]) -> torch.Tensor:
    return torch.cat([by_name[n].detach().reshape(-1) for n in names] or [torch.zeros(0)])


def same_on_all_ranks(tensors: list[torch.Tensor]) -> bool:
    """Whether ``tensors``, end to end, are bit-identical on every rank (collective)."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def attn_grad(net: Net) -> torch.Tensor:
    """The gradient of Net's critical layer (``attn``, weight then bias), flattened."""
    assert net.attn.weight.grad is not None and net.attn.bias.grad is not None
    return torch.cat([net.attn.weight.grad.reshape(-1), net.attn.bias.grad.reshape(-1)])


def pop_bytes(model: SynclaneDDP) -> float:
    return model.session.pop_step_stats()["bytes_sent"]


def train_counting_bytes(
    model: SynclaneDDP, opt: torch.optim.Optimizer, steps: int
) -> tuple[list[float], list[float]]:
    """Train ``steps`` steps; return the losses and the bytes each step sent."""
    sent: list[float] = []  # popped before each step: the previous step's
    losses = train(model, opt, steps, on_step=lambda _: sent.append(pop_bytes(model)))
    return losses, [*sent[1:], pop_bytes(model)]


def check_compress() -> dict[str, Any]:
    """adaptive with bf16 and int8 error-feedback compression against fp32: bytes, replica
    agreement."""
    out: dict[str, Any] = {}
    for wire in ("none", "bf16", "int8"):
        model, opt = wrapped(
            # No drift alarm (it would average every step): every other step sends only
            # the critical gradients.
            base_cfg(
                sync="adaptive",
                warmup_steps=3,
                sync_period=2,
                compress=wire,
                drift_threshold=1e9,
                overlap_critical=False,
            )
        )
        train(model, opt, 1)  # warm-up: everything; no step time agreed yet
        first_bytes = model.session.pop_step_stats()["bytes_sent"]
        train(model, opt, 1)
        model.session.pop_step_stats()
        train(model, opt, 1)  # warm-up with a step time but no link rate
        warmup_bytes = model.session.pop_step_stats()["bytes_sent"]
        train(model, opt, 1)  # the first selective step
        model.session.pop_step_stats()
        losses, steps = train_counting_bytes(model, opt, 12)
        named = dict(model.module.named_parameters())
        critical = [q for n, q in named.items() if n.startswith("attn.")]
        noncritical = [q for n, q in named.items() if not n.startswith("attn.")]
        out[wire] = {
            "first_bytes": first_bytes,
            "warmup_bytes": warmup_bytes,
            "bytes": sum(steps),
            # A step without a periodic average: the critical gradients (and the table).
            "least_step_bytes": min(steps),
            "loss": losses[-1],
            "critical_equal": same_on_all_ranks(critical),
            "noncritical_equal_before_sync": same_on_all_ranks(noncritical),
        }
        model.session.synchronize()
        out[wire]["all_equal_after_sync"] = same_on_all_ranks(list(named.values()))
        model.session.close()
    return out


def check_int8_sum() -> dict[str, Any]:
    """The engine's sum of blockwise int8 rows (``submit_quantized``) against the exact sum.

    Each rank's values differ (scaled by rank + 1). 1 KB chunks split the 9,300 values
    (37 packed rows) into several reduce-scatter/all-gather pairs; at 3 ranks the rows are
    padded to 39 (38 at 2 ranks). Then the same values summed 50 times, with error feedback on
    both quantizations: the running total of the sums must approach 50 exact sums far
    closer than 50 roundings would.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    engine = CommEngine(
        group=dist.new_group(), pacer=link_paced_at(10_000.0), stats=stats, rank=rank,
        chunk_bytes=1024,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(rank)
    values = torch.randn(9300, generator=gen).mul_(rank + 1)
    gathered = [torch.empty_like(values) for _ in range(n)]
    dist.all_gather(gathered, values)
    exact = torch.stack(gathered).sum(dim=0)
    feedback = Int8Feedback()
    total = torch.zeros_like(values, dtype=torch.float64)
    errors = []
    collectives_first = 0.0
    for i in range(50):
        packed = feedback.compress("k", values, rows_multiple=n)
        summed = Int8Feedback.decode(
            engine.submit_quantized(packed, key="k", flush=True).wait(), 9300
        )
        if i == 0:
            collectives_first = stats.pop()["collectives"]
            first = summed.clone()
        errors.append(float((summed - exact).norm() / exact.norm()))
        total += summed.double()
    drift = float((total - 50 * exact.double()).norm() / (50 * exact.double()).norm())
    engine.close()
    return {
        "rows": int(packed.shape[0]),
        "collectives_first": collectives_first,
        "first_error": errors[0],
        "max_error": max(errors),
        "same_on_all_ranks": same_on_all_ranks([first]),
        "drift_after_50": drift,
    }


def check_auto_format() -> dict[str, Any]:
    """compress "auto" at 20 Mbit/s: critical gradients in int8 where that saves enough.

    All of ``attn`` critical (16,512 values): int8 saves ~16 KB a step, ~6 ms on this link,
    most of a step. Only ``attn.bias`` (128 values): ~0.05 ms, too little; bf16.
    """
    out: dict[str, Any] = {}
    for name, critical in (("attn", r"^attn\."), ("bias", r"^attn\.bias$")):
        # Four warm-up steps: the first selective step's format rests on the median of three
        # agreed step times, so one stalled step on a loaded machine does not decide it.
        cfg = base_cfg(
            sync="adaptive", warmup_steps=4, sync_period=32, link_mbps=20.0,
            critical=critical, drift_threshold=1e9, overlap_critical=False,
        )  # fmt: skip
        model, opt = wrapped(cfg)
        quantized: list[bool] = []
        hook_state = model.session.strategy.state  # type: ignore[attr-defined]
        _, steps = train_counting_bytes(model, opt, 8)
        for step in range(9, 13):
            train_one(model, opt, step)
            quantized.append(bool(hook_state.quantize))
        out[name] = {"step_bytes": steps, "quantize_9_to_12": quantized}
        if name == "attn":
            out["decisions"] = int8_decisions(model)
        model.session.close()
    return out


def check_first_step_clock() -> dict[str, Any]:
    """The first step's agreed time, after a 0.5 s pause between wrap() and training (a
    table after every step: steps 1 and 2 are read at the ends of steps 2 and 3)."""
    model, opt = wrapped(base_cfg(sync="adaptive", warmup_steps=4, table_interval_s=0.0))
    time.sleep(0.5)  # as a script loading a checkpoint after wrap() would
    train(model, opt, 3)  # the end of step 2 reads step 1's table, of step 3 step 2's
    times = list(model.session.strategy.step_times)  # type: ignore[attr-defined]
    model.session.close()
    return {"step_times_s": times}


def check_reissue_switch_while_queued() -> dict[str, Any]:
    """Re-issue turned on (as LinkHealth does between steps) while a transfer is queued."""

    def switch(engine: CommEngine) -> None:
        engine.reissue_after_s = 0.05

    return _switch_while_queued(switch)


def check_chunk_switch_while_queued() -> dict[str, Any]:
    """The chunk size cut to 64 KB (LinkHealth halves it per degraded step) while a transfer
    is queued."""

    def switch(engine: CommEngine) -> None:
        engine.set_chunk_bytes(64 * 1024)

    return _switch_while_queued(switch)


def _switch_while_queued(switch: Callable[[CommEngine], None]) -> dict[str, Any]:
    """A 256 KB transfer queued before ``switch`` changes the engine, which rank 0's engine
    thread reaches only after it while rank 1's was already sending. Each must send it as it
    was submitted: mixed settings leave the ranks in mismatched collectives (a hang)."""
    rank = dist.get_rank()
    engine = CommEngine(
        group=dist.new_group(), spare_group=dist.new_group(), pacer=link_paced_at(10_000.0),
        stats=CommStats(), rank=rank,
    )  # fmt: skip
    gate = threading.Event()

    def hold() -> torch.futures.Future[torch.Tensor]:
        gate.wait()
        ready: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        ready.set_result(torch.zeros(0))
        return ready

    if rank == 0:  # rank 0's engine thread reaches the transfer only after the switch
        engine.run_serially(hold, started=time.perf_counter(), payload_bytes=0, wire_bytes=0)
    tensor = torch.full((64 * 1024,), float(rank + 1))
    done = engine.submit(tensor, flush=True)
    time.sleep(0.3)  # rank 1's engine thread is inside its all-reduce by now
    switch(engine)
    gate.set()
    deadline = time.monotonic() + 20
    while not done.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not done.done():
        print(f"rank {rank}: the queued transfer hung", flush=True)
        os._exit(3)  # a collective is stuck: no clean shutdown is possible
    summed = done.value()
    stats = engine.pop_link_stats()
    out = {
        "all_three": bool((summed == 3.0).all()),
        "reissued": stats["reissued"],
        "chunk_bytes_after": engine.chunk_bytes,
    }
    engine.close()
    return out


def check_averaging_bound() -> dict[str, Any]:
    """adaptive's period H on agreed tables of a 20 Mbit/s link and chosen step times, and
    with no link rate known (H from the loss alone)."""
    cfg = base_cfg(sync="adaptive", warmup_steps=2, sync_period=2, max_sync_period=64)
    model, opt = wrapped(cfg)
    train(model, opt, 4)  # past warm-up: the critical set and the loss baseline are known
    strategy = model.session.strategy
    strategy.loss_ema = strategy.loss0  # type: ignore[attr-defined]  # the loss's H: 2
    out: dict[str, Any] = {"wire_share": strategy.wire_share}  # type: ignore[attr-defined]
    strategy._agree_rate([[0.0] * len(COLUMNS)])  # type: ignore[attr-defined]
    strategy._adapt_period()  # type: ignore[attr-defined]
    out["no link"] = strategy.period  # type: ignore[attr-defined]
    table = torch.zeros(dist.get_world_size(), len(COLUMNS), dtype=torch.float64)
    table[:, COL["rate_Bps"]] = 20e6 / 8
    strategy._agree_rate(table.tolist())  # type: ignore[attr-defined]
    for step_s in (0.5, 0.05, 0.01, 0.002):
        strategy.step_times.clear()  # type: ignore[attr-defined]
        strategy.step_times.append(step_s)  # type: ignore[attr-defined]
        strategy._adapt_period()  # type: ignore[attr-defined]
        out[f"{step_s * 1000:g} ms"] = strategy.period  # type: ignore[attr-defined]
    model.session.close()
    return out


def int8_decisions(model: SynclaneDDP) -> dict[str, list[bool]]:
    """adaptive's int8 decision on agreed tables of a 20 Mbit/s link and a chosen step time,
    while the critical gradients go in bf16 and while they go in int8 (the hysteresis).

    int8 saves 16,512 x 4 x (1/2 - 260/1024) bytes a step, 6.5 ms on this link at 2 ranks:
    13% of a 50 ms step, 6.5% of 100 ms, 3.25% of 200 ms.
    """
    strategy = model.session.strategy
    table = torch.zeros(dist.get_world_size(), len(COLUMNS), dtype=torch.float64)
    table[:, COL["rate_Bps"]] = 20e6 / 8
    strategy._agree_rate(table.tolist())  # type: ignore[attr-defined]
    decisions: dict[str, list[bool]] = {}
    for step_s in (0.05, 0.1, 0.2):
        strategy.step_times.clear()  # type: ignore[attr-defined]
        strategy.step_times.append(step_s)  # type: ignore[attr-defined]
        seen = []
        for on in (False, True):
            strategy.state.set_quantize(on)  # type: ignore[attr-defined]
            seen.append(strategy._int8_pays())  # type: ignore[attr-defined]
        decisions[f"{step_s * 1000:g} ms"] = seen
    return decisions


def check_sync_all_format() -> dict[str, Any]:
    """The format of adaptive's warm-up (everything averaged): bytes a step, steps 1-6.

    Net's 152 KB: at 10 Gbit/s bf16 would save ~0.06 ms, a small share of a step (fp32, as
    full); at 20 Mbit/s ~30 ms, most of one (the wire format). Step 1 has no timing yet.
    A table after every step (``table_interval_s`` 0), so each step's bytes compare.
    """
    out: dict[str, Any] = {}
    for name, mbps, wire in (
        ("fast_fp32", 10_000.0, "none"),
        ("fast_bf16", 10_000.0, "bf16"),
        ("slow_bf16", 20.0, "bf16"),
    ):
        cfg = base_cfg(
            sync="adaptive", warmup_steps=6, link_mbps=mbps, compress=wire, table_interval_s=0.0
        )
        model, opt = wrapped(cfg)
        out[name] = []
        for step in range(1, 7):
            train_one(model, opt, step)
            out[name].append(model.session.pop_step_stats()["bytes_sent"])
        model.session.close()
    return out


def check_late_critical() -> dict[str, Any]:
    """adaptive with ``late_critical``: the optimizer gets the previous step's critical average.

    SGD at lr 0 keeps the parameters fixed, so a step's local gradients depend on its batch
    alone: the on-time run's averaged critical gradient of step t must be the late run's at
    step t + 1 (zero at the first selective step, 2), on every rank. Then AdamW with bf16
    on the wire: critical replicas and their moments stay identical while training.
    """
    rank = dist.get_rank()
    seen: dict[bool, list[torch.Tensor]] = {}
    for late in (False, True):
        torch.manual_seed(0)
        net = Net()
        opt: torch.optim.Optimizer = torch.optim.SGD(net.parameters(), lr=0.0)
        cfg = base_cfg(
            sync="adaptive",
            warmup_steps=1,
            compress="none",
            late_critical=late,
            overlap_critical=False,
        )
        model = wrap(net, optimizer=opt, config=cfg, reporter=Reporter(rank=rank))
        seen[late] = []
        for step in range(1, 8):
            loss = model(*batch(rank, step))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            seen[late].append(attn_grad(net).clone())
            opt.step()
        model.session.close()
    on_time, late_grads = seen[False], seen[True]
    torch.manual_seed(0)
    alone = Net()  # this rank's own gradient at step 3, never averaged
    alone(*batch(rank, 3)).backward()
    out: dict[str, Any] = {
        "warmup_equal": torch.equal(on_time[0], late_grads[0]),
        "first_selective_zero": bool(late_grads[1].eq(0).all()),
        "one_step_late": [torch.equal(late_grads[t], on_time[t - 1]) for t in range(2, 7)],
        # The contrast: each rank's own gradient differs, so agreement above is not trivial.
        "local_differs": not same_on_all_ranks([attn_grad(alone)]),
        "late_same_on_all_ranks": all(same_on_all_ranks([g]) for g in late_grads),
    }
    model, opt = wrapped(
        base_cfg(
            sync="adaptive",
            warmup_steps=1,
            sync_period=2,
            late_critical=True,
            overlap_critical=False,
        )
    )
    train(model, opt, 14)
    net = model.module
    moments = [v for q in net.attn.parameters() for v in opt.state[q].values() if v.dim() > 0]
    out["critical_equal"] = same_on_all_ranks([*net.attn.parameters(), *moments])
    out["noncritical_equal_before_sync"] = same_on_all_ranks(list(net.mlp.parameters()))
    model.session.synchronize()
    out["all_equal_after_sync"] = same_on_all_ranks(list(net.parameters()))
    model.session.close()
    return out


def check_overlap_critical() -> dict[str, Any]:
    """adaptive with ``overlap_critical``: no gradient is averaged in backward; after a step
    that follows an average's start a critical parameter is the replicas' mean of the step
    before plus this rank's own local step.

    SGD (its local steps are not scaled) and fp32 on the wire, the default period P (2):
    with s_t this rank's critical parameters after step t's optimizer step (the snapshot
    averaged meanwhile when P divides t) and g this rank's gradient of step t + 1, every
    rank must hold s_{t+1} = mean(s_t) - lr g after step t + 1 where P divides t, and
    s_t - lr g (a local step only) otherwise. Then AdamW with bf16: training goes on, the
    replicas differ by their last local steps, and synchronize() makes them identical.
    """
    rank, world, lr = dist.get_rank(), dist.get_world_size(), 0.05
    torch.manual_seed(0)
    net = Net()
    opt: torch.optim.Optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    cfg = base_cfg(sync="adaptive", warmup_steps=1, compress="none", overlap_critical=True)
    model = wrap(net, optimizer=opt, config=cfg, reporter=Reporter(rank=rank))
    period = model.session.strategy.critical_period  # type: ignore[attr-defined]
    grads: list[torch.Tensor] = []
    snaps: list[torch.Tensor] = []
    for step in range(1, 9):
        loss = model(*batch(rank, step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads.append(attn_grad(net).clone())
        opt.step()
        snaps.append(torch.cat([q.detach().reshape(-1) for q in net.attn.parameters()]))
    model.session.close()
    errors, local_steps, averaged = [], [], []
    for t in range(1, 7):  # snaps[t] is after step t + 1: the first selective step is 2
        start = snaps[t - 1].clone()  # after step t
        if t % period == 0:  # an average of it started after step t
            dist.all_reduce(start)
            start.div_(world)
            averaged.append(t)
        expected = start.sub_(grads[t], alpha=lr)
        errors.append(float((snaps[t] - expected).abs().max()))
        local_steps.append(float(grads[t].abs().max()) * lr)
    out: dict[str, Any] = {
        "period": period,
        "averaged_after": averaged,
        "warmup_grad_same": same_on_all_ranks([grads[0]]),
        "selective_grads_local": [not same_on_all_ranks([g]) for g in grads[1:]],
        "max_error": max(errors),
        "min_local_step": min(local_steps),
        "replicas_differ": not same_on_all_ranks([snaps[-1]]),
    }
    model, opt = wrapped(base_cfg(sync="adaptive", warmup_steps=1, overlap_critical=True))
    losses = train(model, opt, 14)
    out["losses_finite"] = all(math.isfinite(v) for v in losses)
    out["equal_before_sync"] = same_on_all_ranks(list(model.module.parameters()))
    model.session.synchronize()
    out["all_equal_after_sync"] = same_on_all_ranks(list(model.module.parameters()))
    model.session.close()
    return out


def check_outer_momentum() -> dict[str, Any]:
    """adaptive with ``outer_momentum``: each average moves the synced copy by the replicas'
    mean movement plus beta times the previous average's step (SlowMo), on every rank alike.

    fp32 deltas (``compress`` none) and an average every 2 steps, applied one step later.
    Each rank records, per average, the last synced values, its snapshot and the synced values
    after; the check recomputes the mean movement from the gathered snapshots and the
    expected step by name (a name new to the non-critical set starts with no momentum).
    """
    beta = 0.5
    cfg = base_cfg(
        sync="adaptive",
        warmup_steps=2,
        sync_period=2,
        max_sync_period=2,
        compress="none",
        deterministic=True,
        outer_momentum=beta,
    )
    model, opt = wrapped(cfg)
    strategy = model.session.strategy
    apply_pending = strategy._apply_pending  # type: ignore[attr-defined]
    records: list[tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def recording() -> None:
        pending = strategy._pending  # type: ignore[attr-defined]
        if pending is None:
            return apply_pending()
        names = list(pending.names)
        before = pending.base.clone()
        snapshot = pending.base + pending.delta
        apply_pending()
        after = torch.cat([strategy.synced[n] for n in names])  # type: ignore[attr-defined]
        records.append((names, before, snapshot, after.clone()))

    strategy._apply_pending = recording  # type: ignore[attr-defined]
    train(model, opt, 24)
    sizes = {n: q.numel() for n, q in model.module.named_parameters()}
    previous: dict[str, torch.Tensor] = {}
    worst = 0.0
    momentum_share = 0.0  # how much of the steps the momentum term made (0: plain averages)
    all_equal = True
    for names, before, snapshot, after in records:
        gathered = [torch.empty_like(snapshot) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, snapshot)
        mean_move = torch.stack(gathered).mean(0) - before
        split = [sizes[n] for n in names]
        expected: dict[str, torch.Tensor] = {}
        for name, move in zip(names, torch.split(mean_move, split), strict=True):
            carried = beta * previous.get(name, torch.zeros_like(move))
            expected[name] = move + carried
            momentum_share = max(momentum_share, float(carried.norm() / move.norm()))
        step = after - before
        want = torch.cat([expected[n] for n in names])
        worst = max(worst, float((step - want).abs().max() / want.abs().max()))
        all_equal = all_equal and same_on_all_ranks([after])
        previous = dict(zip(names, torch.split(step, split), strict=True))
    model.session.close()
    return {
        "averages": len(records),
        "worst_relative_error": worst,
        "momentum_share": momentum_share,
        "synced_equal": all_equal,
    }


def check_fast_link_equals_full() -> dict[str, Any]:
    """adaptive (defaults: auto format, bf16 wire) on a link fast enough for fast-link mode
    trains exactly as full: the same parameters after each of 16 steps (2 ranks).

    10 Gbit/s: Net's 152 KB of gradients take ~0.12 ms, a few % of a step, and bf16 would save
    half of that. The same runs on a 20 Mbit/s link are the contrast (selective sync there).
    """
    out: dict[str, Any] = {}
    for mbps in (10_000.0, 20.0):
        trained: dict[str, list[torch.Tensor]] = {}
        fast_steps = 0
        for sync in ("full", "adaptive"):
            model, opt = wrapped(base_cfg(sync=sync, warmup_steps=4, link_mbps=mbps))
            trained[sync] = []
            for step in range(1, 17):
                train_one(model, opt, step)
                trained[sync].append(
                    torch.cat([q.detach().reshape(-1).clone() for q in model.module.parameters()])
                )
                if sync == "adaptive":
                    fast_steps += int(model.session.pop_step_stats()["fast_link"] == 1.0)
            model.session.close()
        out[f"{mbps:g}"] = {
            "equal_steps": [
                step
                for step, (a, b) in enumerate(
                    zip(trained["full"], trained["adaptive"], strict=True), 1
                )
                if torch.equal(a, b)
            ],
            "fast_link_steps": fast_steps,
        }
    return out


def check_critical_fusion() -> dict[str, Any]:
    """Critical slices of two buckets on a 400 Mbit/s link: collectives per step when they
    are fused up to ``CRITICAL_FUSE_S`` of link time (100 KB here), and under the fixed
    16 KB that rule replaced.

    64 KB buckets: ``mlp`` (33 KB in bf16) is in the first bucket backward hands over,
    ``embed`` (8.4 KB) in the last. No optimizer is passed to ``wrap`` (the step ends are
    told to the session), so adaptive has no fast-link mode and stays selective whatever
    the machine's step time; the sync period is out of reach, so no average adds
    collectives. Steps 4-8 are counted (warm-up: 1-2).
    """
    out: dict[str, Any] = {}
    by_link_time = adaptive_module.CRITICAL_FUSE_S
    for name, fuse_s in (("by_link_time", by_link_time), ("fixed_16k", 0.0)):
        adaptive_module.CRITICAL_FUSE_S = fuse_s
        net, opt = fresh()
        cfg = base_cfg(
            sync="adaptive",
            overlap_critical=False,
            critical=r"^(mlp|embed)\.",
            compress="bf16",
            link_mbps=400.0,
            bucket_cap_mb=0.0625,
            warmup_steps=2,
            sync_period=32,
            drift_threshold=10.0,
        )
        model = wrap(net, config=cfg, reporter=Reporter(rank=dist.get_rank()))
        counts, fuse_bytes = [], []
        for step in range(1, 9):
            train_one(model, opt, step)
            model.session.after_optimizer_step()  # wrap was not given the optimizer
            collectives = model.session.pop_step_stats()["collectives"]
            if step >= 4:
                counts.append(collectives)
                fuse_bytes.append(model.session.engine.fuse_bytes)
        out[name] = {"collectives": counts, "fuse_bytes": fuse_bytes}
        model.session.close()
    adaptive_module.CRITICAL_FUSE_S = by_link_time
    return out


CHECKS = {
    f.__name__.removeprefix("check_"): f
    for f in (
        check_numerics,
        check_peers,
        check_powersgd_zero_gradients,
        check_buffers,
        check_throttle,
        check_drift,
        check_drift_every_second,
        check_agree_cadence,
        check_fault,
        check_table_cadence,
        check_spike,
        check_reissue,
        check_probes,
        check_local_step_scale,
        check_background_lane,
        check_fast_link,
        check_promotion,
        check_lane_gating,
        check_lane_chunks,
        check_compress,
        check_int8_sum,
        check_auto_format,
        check_drift_together,
        check_first_step_clock,
        check_averaging_bound,
        check_reissue_switch_while_queued,
        check_chunk_switch_while_queued,
        check_late_critical,
        check_overlap_critical,
        check_sync_all_format,
        check_outer_momentum,
        check_fast_link_equals_full,
        check_critical_fusion,
    )
}


def main() -> None:
    name, out_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    result = CHECKS[name]()
    if dist.get_rank() == 0:
        with open(out_path, "w") as fh:
            json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
