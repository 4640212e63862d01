"""synclane: the Synclane runtime, as a training script imports it.

    import torch.distributed as dist
    from synclane import Checkpointer, Reporter, wrap

    dist.init_process_group("gloo")
    model = wrap(net, optimizer=optimizer)           # sync strategy from the job
    with Checkpointer(model, optimizer) as ckpt:     # save, resume, stop on SIGTERM
        for step in range(ckpt.resume() + 1, steps + 1):
            ...
            model.session.reporter.log({"loss": loss.item()}, step=step)
            ckpt.step_done(step)

See docs/user-guide.md. Everything here is re-exported from ``workers.runtime``; the names
below are the stable public interface.
"""

from __future__ import annotations

from workers.runtime import protocol
from workers.runtime.checkpoint import Checkpointer, output_dir
from workers.runtime.config import RuntimeConfig
from workers.runtime.health import LinkFailure
from workers.runtime.reporter import AllocationClient, Reporter
from workers.runtime.session import SynclaneDDP, SyncSession, wrap

EXIT_STOPPED_AFTER_CHECKPOINT = protocol.EXIT_STOPPED_AFTER_CHECKPOINT
EXIT_LINK_FAILED = protocol.EXIT_LINK_FAILED


__all__ = [
    "EXIT_LINK_FAILED",
    "EXIT_STOPPED_AFTER_CHECKPOINT",
    "AllocationClient",
    "Checkpointer",
    "LinkFailure",
    "Reporter",
    "RuntimeConfig",
    "SyncSession",
    "SynclaneDDP",
    "output_dir",
    "wrap",
]
