"""The model zoo x every sync strategy x what torch users do, on real ranks (gloo).

    torchrun --standalone --nnodes 1 --nproc-per-node 2 tests/runtime/zoo_checks.py OUT.json CASES

``CASES`` is a JSON list of ``[model, feature, loss_inside, [strategies...], {config}]`` (the
last item optional: RuntimeConfig fields over the defaults below); each case
trains the zoo model (``workers.workloads.zoo``) a few steps with one feature on, under each
strategy (``plain``: torch's own DDP, the reference ``full`` must equal) and checks what the
strategy promises about the replicas. Rank 0 writes one result per (case, strategy) to
OUT.json; tests/runtime/test_zoo.py asserts on them. Cases are grouped per launch to pay
torchrun's and torch's start-up once.

``ZOO_DEVICE=cuda`` and ``ZOO_BACKEND=nccl`` (defaults ``cpu`` and ``gloo``) run the same
cases on a GPU (tests/gpu/device_check.sh): models, batches and autocast on
``cuda:<local rank % GPUs>``, deterministic kernels so ``full`` can still equal plain DDP.

Features: ``compile`` (torch.compile, aot_eager backend: dynamo, DDP's graph splitting and
AOT autograd without a C++ toolchain), ``no_sync`` (2 micro-batches, the first under
``no_sync()``), ``bf16`` (CPU autocast), ``clip`` (``session.clip_grad_norm_``; torch's own
for plain DDP), ``lr_scheduler`` (StepLR), ``checkpoint`` (stop at step 3, resume in a new
wrap from the checkpoint, go on to the end; plain DDP runs uninterrupted). And the hazards
the runtime guards against: ``torch_clip`` (torch's clip_grad_norm_ under a strategy),
``silent_loss`` (loss outside forward, never shown to the session), ``find_unused`` (a
parameter forward never uses; ``find_unused_parameters=True`` passed through ``wrap``),
``no_optimizer`` (``wrap`` without the optimizer; the script calls the session itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workers.runtime.checkpoint import Checkpointer
from workers.runtime.config import RuntimeConfig
from workers.runtime.reporter import Reporter
from workers.runtime.session import SynclaneDDP, wrap
from workers.workloads.zoo import ZOO, ModelSpec

STEPS = 6
BATCH = 4
DEVICE_KIND = os.environ.get("ZOO_DEVICE", "cpu")
BACKEND = os.environ.get("ZOO_BACKEND", "gloo")
CLIP = 0.5
RESUME_AT = 3


def config(strategy: str, overrides: dict[str, Any]) -> RuntimeConfig:
    return RuntimeConfig(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        sync=strategy,
        warmup_steps=2,
        sync_period=2,
        max_sync_period=4,
        probe_every=0,
        **overrides,
    )


class Run:
    """One strategy's model, optimizer and scheduler, and how to take one training step."""

    def __init__(
        self,
        spec: ModelSpec,
        strategy: str,
        feature: str,
        loss_inside: bool,
        overrides: dict[str, Any],
    ) -> None:
        self.spec, self.strategy, self.feature, self.loss_inside = (
            spec,
            strategy,
            feature,
            loss_inside,
        )
        net = spec.build(loss_inside=loss_inside).to(device())
        options: dict[str, Any] = {}
        if feature == "compile" and strategy == "adaptive":
            # Buckets below DDP's 1 MB first bucket: what wrap() must split for dynamo.
            overrides = {"bucket_cap_mb": 0.0625, **overrides}
        if feature == "find_unused":
            net.spare = nn.Linear(64, 64)  # registered, never used in forward
            options["find_unused_parameters"] = True
        self.optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
        self.ddp: DistributedDataParallel
        if strategy == "plain":
            self.ddp = DistributedDataParallel(net, **options)
        else:
            self.ddp = wrap(
                net,
                optimizer=None if feature == "no_optimizer" else self.optimizer,
                config=config(strategy, overrides),
                reporter=Reporter(),
                **options,
            )
        self.scheduler = (
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
            if feature == "lr_scheduler"
            else None
        )
        self.forward: nn.Module = (
            torch.compile(self.ddp, backend="aot_eager") if feature == "compile" else self.ddp  # type: ignore[assignment]
        )

    @property
    def session(self) -> Any:
        return self.ddp.session if isinstance(self.ddp, SynclaneDDP) else None

    def loss(self, step: int, micro: int) -> torch.Tensor:
        x, y = on_device(self.spec.batch(dist.get_rank(), 2 * step + micro, BATCH))
        autocast = (
            torch.autocast(DEVICE_KIND, dtype=torch.bfloat16)
            if self.feature == "bf16"
            else contextlib.nullcontext()
        )
        with autocast:
            if self.loss_inside:
                return self.forward(x, y)  # type: ignore[no-any-return]
            loss = self.spec.loss(self.forward(x), y)
        if self.session is not None and self.feature != "silent_loss":
            self.session.note_loss(loss)  # forward returned logits: tell adaptive the loss
        return loss

    def step(self, step: int) -> float:
        micros = 2 if self.feature == "no_sync" else 1
        total = 0.0
        for micro in range(micros):
            last = micro == micros - 1
            context = contextlib.nullcontext() if last else self.ddp.no_sync()
            with context:
                loss = self.loss(step, micro) / micros
                loss.backward()
            total += float(loss.detach())
        if self.feature in ("clip", "torch_clip"):
            if self.session is not None and self.feature == "clip":
                self.session.clip_grad_norm_(self.ddp.parameters(), CLIP)
            else:
                torch.nn.utils.clip_grad_norm_(self.ddp.parameters(), CLIP)
        self.optimizer.step()
        if self.feature == "no_optimizer" and self.session is not None:
            self.session.after_optimizer_step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        return total

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


def device() -> torch.device:
    if DEVICE_KIND == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())


def on_device(pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return pair[0].to(device()), pair[1].to(device())


def equal_on_all_ranks(tensors: list[torch.Tensor]) -> bool:
    """Whether ``tensors`` are bit-identical to rank 0's on every rank."""
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors]) if tensors else None
    if flat is None:
        return True
    reference = flat.clone()
    dist.broadcast(reference, 0)
    same = torch.tensor([int(torch.equal(flat, reference))], device=flat.device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item())


def promised(run: Run) -> tuple[str, list[torch.Tensor]]:
    """What the strategy promises identical on every rank after a step, and those tensors."""
    named = [(n, q) for n, q in run.ddp.module.named_parameters() if q.requires_grad]
    if run.strategy in ("plain", "full", "powersgd"):
        return "all", [q for _, q in named]
    if run.strategy == "adaptive" and not run.session.strategy.state.overlap:
        critical = run.session.strategy.critical_names  # their gradients averaged in backward
        return "critical", [q for n, q in named if n in critical]
    return "nothing", []  # adaptive by default: critical replicas a local step apart


def train(
    spec: ModelSpec,
    strategy: str,
    feature: str,
    loss_inside: bool,
    folder: Path,
    overrides: dict[str, Any],
) -> Any:
    """Train one strategy; return its losses, the trained run and the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = Run(spec, strategy, feature, loss_inside, overrides)
        losses: list[float] = []
        if feature == "checkpoint" and strategy != "plain":
            folder.mkdir(parents=True, exist_ok=True)
            with Checkpointer(run.ddp, run.optimizer, run_dir=folder, every=RESUME_AT,
                              handle_signals=False) as ckpt:  # fmt: skip
                for step in range(1, RESUME_AT + 1):
                    losses.append(run.step(step))
                    ckpt.step_done(step)
            run.close()
            run = Run(
                spec, strategy, feature, loss_inside, overrides
            )  # a new process would do the same
            with Checkpointer(run.ddp, run.optimizer, run_dir=folder, every=0,
                              handle_signals=False) as ckpt:  # fmt: skip
                resumed = ckpt.resume()
                assert resumed == RESUME_AT, resumed
                for step in range(resumed + 1, STEPS + 1):
                    losses.append(run.step(step))
        else:
            for step in range(1, STEPS + 1):
                losses.append(run.step(step))
    messages = sorted({str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)})
    return losses, run, messages


def check_case(
    model: str,
    feature: str,
    loss_inside: bool,
    strategies: list[str],
    folder: Path,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    spec = ZOO[model]
    results: dict[str, Any] = {}
    plain_params: list[torch.Tensor] | None = None
    plain_losses: list[float] | None = None
    for strategy in strategies:
        started = time.perf_counter()
        losses, run, messages = train(
            spec, strategy, feature, loss_inside, folder / strategy, overrides
        )
        params = [q.detach().clone() for q in run.ddp.module.parameters()]
        digest = hashlib.sha256()
        for q in params:
            digest.update(q.cpu().numpy().tobytes())
        kind, tensors = promised(run)
        out: dict[str, Any] = {
            "losses": losses,
            "finite": all(torch.isfinite(torch.tensor(losses)).tolist()),
            "promise": kind,
            "promised_count": len(tensors),
            "promised_equal": equal_on_all_ranks(tensors),
            "warnings": messages,
            "params_sha256": digest.hexdigest(),
        }
        if strategy == "adaptive":
            critical = run.session.strategy.critical_names
            named = list(run.ddp.module.named_parameters())
            out["critical_share"] = sum(q.numel() for n, q in named if n in critical) / sum(
                q.numel() for _, q in named
            )
            out["sync_period"] = run.session.strategy.period
        if strategy == "plain":
            plain_params, plain_losses = params, losses
        elif plain_params is not None:
            out["equals_plain"] = losses == plain_losses and all(
                torch.equal(a, b) for a, b in zip(plain_params, params, strict=True)
            )
        if run.session is not None and strategy != "none":
            run.session.synchronize()
            out["equal_after_synchronize"] = equal_on_all_ranks(list(run.ddp.module.parameters()))
        run.close()
        out["seconds"] = round(time.perf_counter() - started, 2)
        results[strategy] = out
    return results


def check_split_bound(model: str) -> dict[str, Any]:
    """One step's averaged gradients: ``full`` with buckets split into 64 KB chunks (what a
    degraded link does) vs plain DDP, against the stated bound per element,
    ``2 (n - 1) 2^-24 sum_i |g_i / n|`` (fp32 sums of n addends in two different orders)."""
    spec, n = ZOO[model], dist.get_world_size()
    x, y = on_device(spec.batch(dist.get_rank(), 1, BATCH))

    def grads(module: nn.Module) -> list[torch.Tensor]:
        module(x, y).backward()
        return [q.grad.detach().clone() for q in module.parameters() if q.grad is not None]

    plain = grads(DistributedDataParallel(spec.build(loss_inside=True).to(device())))
    absolute = torch.cat(
        [g.abs().reshape(-1) for g in grads(spec.build(loss_inside=True).to(device()))]
    )
    dist.all_reduce(absolute.div_(n))
    model_ = wrap(
        spec.build(loss_inside=True).to(device()), config=config("full", {"chunk_kb": 64})
    )
    model_.session.engine.whole_buckets = False  # as on a degraded link: 64 KB chunks
    split = grads(model_)
    model_.session.close()
    diff = torch.cat([(a - b).abs().reshape(-1) for a, b in zip(split, plain, strict=True)])
    bound = 2 * (n - 1) * 2.0**-24 * absolute
    return {
        "within_bound": bool((diff <= bound).all()),
        "bit_identical": bool((diff == 0).all()),
        "max_diff": float(diff.max()),
    }


def main() -> None:
    out_path, cases = Path(sys.argv[1]), json.loads(sys.argv[2])
    torch.set_num_threads(1)
    if DEVICE_KIND == "cuda":
        torch.cuda.set_device(device())
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.use_deterministic_algorithms(True, warn_only=True)
    dist.init_process_group(BACKEND)
    results = []
    for index, (model, feature, loss_inside, strategies, *rest) in enumerate(cases):
        if feature == "split_bound":
            results.append({"model": model, "feature": feature, **check_split_bound(model)})
            continue
        folder = out_path.parent / f"{index}-{model}-{feature}"
        overrides = rest[0] if rest else {}
        runs = check_case(model, feature, bool(loss_inside), strategies, folder, overrides)
        results.append(
            {"model": model, "feature": feature, "loss_inside": loss_inside, "runs": runs}
        )
        if dist.get_rank() == 0:
            print(
                f"{model} {feature} inside={loss_inside}:",
                {s: r["seconds"] for s, r in runs.items()},
                flush=True,
            )
    if dist.get_rank() == 0:
        out_path.write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
