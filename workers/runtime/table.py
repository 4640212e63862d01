"""An agreed table on its way: this rank's row, summed with the other ranks' rows.

Each rank fills its own row of a (world x columns) float64 table and the ranks SUM it, so
every rank gets every row (``SyncSession._agree``). A table goes alone, as an all-reduce
on the session's table group, or rides a collective a strategy starts at the same step
(``ride``: adaptive's critical average, which the ranks meet for anyway). Each collective
costs a meeting of the ranks and the transport's per-message work on every rank: measured
on the 2-core benchmark machine (bench_meeting), one gloo all-reduce between two processes
took about 1 ms and 0.64 ms of CPU a rank whatever it carried up to 64 KB, most of it in
the kernel (docs/benchmarks.md), as much as half a step of the smallest benchmark model.

A riding table goes in the collective's dtype, split exactly (``compress.exact_parts``): a
cell is nonzero on one rank only, so the sum adds zeros and the table arrives as sent, to
fp32's precision or better. Whether a table rides is agreed (the strategy decides it from
agreed state; the dtype decides whether it can), so every rank's groups see the same
collectives.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

from workers.runtime.compress import exact_parts, from_exact_parts
from workers.runtime.stats import CommStats, ring_allreduce_wire_bytes


class TableRow:
    """This rank's row of the table agreed after optimizer step ``step``."""

    def __init__(self, row: list[float], *, rank: int, world_size: int, step: int) -> None:
        self.step = step
        self.table = torch.zeros(world_size, len(row), dtype=torch.float64)
        self.table[rank] = torch.tensor(row, dtype=torch.float64)
        self._work: dist.Work | None = None  # sent alone
        self._carrier: torch.futures.Future[torch.Tensor] | None = None  # riding
        self._offset = 0  # where the table's parts start in the carrier's tensor
        self.rode = False  # whether it went with a strategy's collective

    @property
    def sent(self) -> bool:
        """Whether it went, alone or riding a collective."""
        return self._work is not None or self.rode

    @property
    def alone(self) -> bool:
        """Sent on the table's group (so waited for before other traffic on it)."""
        return self._work is not None

    def ride(
        self,
        wire: torch.Tensor,
        submit: Callable[[torch.Tensor], torch.futures.Future[torch.Tensor]],
    ) -> torch.futures.Future[torch.Tensor]:
        """Sum ``wire`` (1-D) across ranks with ``submit`` (a SUM all-reduce), the table
        appended when ``wire``'s dtype can carry it exactly; return ``submit``'s Future.
        The sum of ``wire`` is the first ``wire.numel()`` values of its tensor."""
        parts = None if self.sent else exact_parts(self.table.reshape(-1), wire.dtype)
        if parts is None:
            return submit(wire)
        self._offset, self.rode = wire.numel(), True
        self._carrier = submit(torch.cat([wire, parts]))
        return self._carrier

    def send_alone(self, group: dist.ProcessGroup, stats: CommStats) -> None:
        """All-reduce the table on ``group``, unless it rides a collective already. Not
        waited for: it crosses while the next steps compute. Its bytes are counted in
        ``stats`` (a riding table's are in its carrier's)."""
        if self.sent:
            return
        payload = self.table.numel() * self.table.element_size()
        started = stats.launched()
        self._work = dist.all_reduce(self.table, group=group, async_op=True)
        world_size = self.table.shape[0]
        wire = ring_allreduce_wire_bytes(payload, world_size)
        stats.completed(started, payload_bytes=payload, wire_bytes=wire)

    def wait(self, timeout: timedelta | None = None) -> torch.Tensor:
        """Block until the table has arrived and return it, agreed (a table that never left
        is this rank's row alone)."""
        if self._work is not None:
            if timeout is None:
                self._work.wait()
            else:
                self._work.wait(timeout)
        elif self._carrier is not None:
            summed = self._carrier.wait()[self._offset :]
            self.table = from_exact_parts(summed, self.table.numel()).view_as(self.table)
            self._carrier = None
        return self.table
