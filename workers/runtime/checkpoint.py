"""``Checkpointer``: save and resume a run's state, stop cleanly when the supervisor asks.

    with Checkpointer(model, optimizer) as ckpt:   # run folder: $SYNCLANE_RUN_DIR
        for step in range(ckpt.resume() + 1, steps + 1):
            ...                                     # forward, backward, optimizer.step()
            ckpt.step_done(step)                    # saves every N steps; SIGTERM: save, exit 75

What the supervisor relies on, for user scripts exactly as for the built-in workloads:

* **Preemption and cancel** send SIGTERM to every rank. The handler only sets a flag; the next
  ``step_done`` agrees on it across ranks (one 4-byte all-reduce), saves the step, writes
  ``RUN_DIR/exit.json`` and exits with ``EXIT_STOPPED_AFTER_CHECKPOINT`` (75).
* **Link failure escalation** raises ``LinkFailure`` from ``optimizer.step()`` on every rank at
  the same step; leaving the ``with`` block with it saves that step and exits with its code (76).
* **Restarts** start the script again: ``resume()`` loads the newest *valid* checkpoint (see
  ``checkpoint_files``: a torn or corrupt file is skipped) and returns its step. The supervisor
  reads the same step from the file names.

Rank 0 writes (temporary file, fsync, rename, then the digest), every rank waits for it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from workers.runtime import checkpoint_files as files
from workers.runtime import protocol as p
from workers.runtime.groups import flag_device
from workers.runtime.health import LinkFailure
from workers.runtime.reporter import Reporter
from workers.runtime.session import SynclaneDDP

DEFAULT_EVERY = 50  # steps between checkpoints when neither the caller nor the job says
DEFAULT_RUN_DIR = "run/synclane"  # outside Synclane, without SYNCLANE_RUN_DIR


class Stateful(Protocol):
    """Anything with ``state_dict`` / ``load_state_dict`` (an LR scheduler, a data sampler)."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


class Checkpointer:
    """Checkpoints of one model (and optimizer, and any extra stateful objects) in the run folder.

    ``model`` is what ``wrap()`` returned (its session's step and strategy state are saved and
    restored too) or a plain module. ``run_dir`` None reads ``SYNCLANE_RUN_DIR``; ``every`` None
    reads ``SYNCLANE_CHECKPOINT_EVERY`` (the job's checkpoint interval; 0 saves only on stop);
    ``keep`` valid checkpoints are kept. Installs SIGTERM/SIGINT handlers unless
    ``handle_signals`` is False. Collective: construct and call it on every rank.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        run_dir: str | Path | None = None,
        every: int | None = None,
        keep: int = 2,
        extra: Mapping[str, Stateful] | None = None,
        reporter: Reporter | None = None,
        handle_signals: bool = True,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.model = model
        self.optimizer = optimizer
        self.extra = dict(extra or {})
        self.run_dir = Path(run_dir) if run_dir else output_dir()
        self.every = _every_from_env() if every is None else every
        if self.every < 0:
            raise ValueError("every must be 0 (only on stop) or a positive number of steps")
        self.keep = keep
        session = model.session if isinstance(model, SynclaneDDP) else None
        self.reporter = reporter or (session.reporter if session is not None else None)
        self.signum = 0  # the stop signal received, 0 while none
        self.saved_step: int | None = None  # the step of the last checkpoint written or loaded
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)

    # ------------------------------------------------------------ the user-facing calls

    def resume(self) -> int:
        """Load the newest valid checkpoint; return its step (0 when there is none).

        A checkpoint that fails to load (bad pickle, wrong model) is skipped with a warning
        and the next older one is tried. Collective: every rank loads the same file.
        """
        for step, path in files.valid_checkpoints(self.run_dir):
            try:
                state = torch.load(path, map_location="cpu", weights_only=False)
                self._load(state)
            except Exception as exc:  # noqa: BLE001 - any failure means "not this one"
                warnings.warn(f"synclane: skipping checkpoint {path.name}: {exc}", stacklevel=2)
                continue
            self.saved_step = step
            self._event("resumed", resumed_from_step=step, checkpoint=path.name)
            if _rank() == 0:
                print(f"synclane: resumed_from_step={step} ({path.name})", flush=True)
            return step
        return 0

    def step_done(self, step: int) -> None:
        """Call after each optimizer step: saves every ``every`` steps; stops on a signal.

        On SIGTERM/SIGINT (on any rank) it saves ``step``, writes ``exit.json``, closes the
        run and raises ``SystemExit(75)``: the supervisor resumes the job from this step.
        """
        if self.every and step % self.every == 0:
            self.save(step)
        if self.stop_requested():
            code = self.stop(step)
            self.close()
            raise SystemExit(code)

    def save(self, step: int) -> Path:
        """Save the state at ``step`` (rank 0 writes, all ranks wait); return the file's path."""
        path = files.checkpoint_path(self.run_dir, step)
        if _rank() == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            state = self._state(step)
            files.write_atomically(path, lambda fh: torch.save(state, fh))
            files.commit(path)
            files.prune(self.run_dir, self.keep)
        _barrier()
        self.saved_step = step
        return path

    def stop_requested(self) -> bool:
        """Return True on every rank once any rank got SIGTERM/SIGINT (ranks agree first).

        Ranks get the signal at slightly different moments; agreeing keeps them from leaving
        a collective half-joined.
        """
        flag = torch.tensor([1 if self.signum else 0], dtype=torch.int32)
        if dist.is_initialized():
            flag = flag.to(flag_device())  # NCCL carries no CPU tensor
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def stop(self, step: int, *, code: int = p.EXIT_STOPPED_AFTER_CHECKPOINT) -> int:
        """Save ``step`` unless already saved, record why the run stops; return ``code``."""
        if self.saved_step != step:
            self.save(step)
        reason = f"signal {self.signum}" if self.signum else "stopped"
        self._event("stopped", step=step, signal=self.signum, exit_code=code)
        self._write_exit(code, reason, step)
        if _rank() == 0:
            print(f"synclane: stopped by {reason} at step {step}; checkpoint saved", flush=True)
        return code

    def close(self) -> None:
        """End the run's side of things: the session, the reporter, the process group."""
        if isinstance(self.model, SynclaneDDP):
            self.model.session.close()
        if self.reporter is not None:
            self.reporter.close()
        if dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """A ``LinkFailure`` leaving the block saves its step and exits with its code (76)."""
        if isinstance(exc, LinkFailure):
            self.link_failed(exc)
            self.close()
            sys.exit(exc.exit_code)

    def link_failed(self, exc: LinkFailure) -> int:
        """Save the step the link failed at (the optimizer step completed) and record it."""
        step = self._session_step()
        if self.saved_step != step:
            self.save(step)
        self._event("link_failed", step=step, detail=str(exc), exit_code=exc.exit_code)
        self._write_exit(exc.exit_code, f"link failure: {exc}", step)
        if _rank() == 0:
            print(f"synclane: link failure: {exc}; checkpoint written at step {step}", flush=True)
        return exc.exit_code

    # ------------------------------------------------------------ state

    def _module(self) -> nn.Module:
        return self.model.module if isinstance(self.model, SynclaneDDP) else self.model

    def _session_step(self) -> int:
        return self.model.session.step if isinstance(self.model, SynclaneDDP) else 0

    def _state(self, step: int) -> dict[str, Any]:
        state: dict[str, Any] = {
            "step": step,
            "model": self._module().state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "extra": {name: obj.state_dict() for name, obj in self.extra.items()},
        }
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if isinstance(self.model, SynclaneDDP):
            state["synclane"] = self.model.session.state_dict()
        return state

    def _load(self, state: Mapping[str, Any]) -> None:
        """Put ``state`` back; a wrapped model's replicas are re-anchored on the loaded weights."""
        self._module().load_state_dict(state["model"])
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        for name, obj in self.extra.items():
            if name in state.get("extra", {}):
                obj.load_state_dict(state["extra"][name])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        if isinstance(self.model, SynclaneDDP):
            session = self.model.session
            session.load_state_dict(state.get("synclane") or {"step": int(state["step"])})
            # Strategies that keep the last globally synced weights took them at wrap();
            # every rank loaded the same weights, so re-take them now.
            session.synchronize()

    # ------------------------------------------------------------ helpers

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum

    def _event(self, kind: str, **data: Any) -> None:
        if self.reporter is not None:
            self.reporter.event(kind, **data)

    def _write_exit(self, code: int, reason: str, step: int) -> None:
        """Rank 0 records why it exits: torchrun flattens a worker's exit status to 1."""
        if _rank() == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            info = {"code": code, "reason": reason, "step": step}
            (self.run_dir / p.EXIT_FILE).write_text(json.dumps(info))


def output_dir() -> Path:
    """Return the job's output folder (``SYNCLANE_RUN_DIR``; ``run/synclane`` outside Synclane).

    Whatever a script writes under it is listed and downloadable as the job's artifacts.
    """
    return Path(os.environ.get(p.ENV_RUN_DIR) or DEFAULT_RUN_DIR)


def _every_from_env() -> int:
    raw = os.environ.get(p.ENV_CHECKPOINT_EVERY)
    if raw is None or raw == "":
        return DEFAULT_EVERY
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{p.ENV_CHECKPOINT_EVERY} must be an integer, got {raw!r}") from None


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
