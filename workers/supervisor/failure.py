"""Say why a run failed: which rank, its exit code or signal, its last log lines.

torchrun exits 1 whatever happened to a rank; what it knows it prints to its own output
(``RUN_DIR/torchrun.log``): a "Root Cause" block naming the first rank that failed and
its exit code (negative: killed by a signal), and every rank's lines prefixed
``[default<local rank>]:``. A hung run is told by the supervisor itself, with a
``straggler`` alarm.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from controlplane.jobs.models import Job
from controlplane.lib.publish import publish_on_commit
from controlplane.telemetry.groups import CLUSTER_GROUP, job_group, tenant_group
from controlplane.telemetry.models import Alarm, AlarmKind
from workers.runtime import run_files

LOG_FILE = "torchrun.log"
TAIL_LINES = 3
TAIL_BYTES = 1 << 20  # torchrun's "Root Cause" block comes last: 1 MiB holds it and more
_ROOT_CAUSE = re.compile(
    r"Root Cause.*?rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)"
    r".*?exitcode\s*:\s*(?P<code>-?\d+)",
    re.S,
)


def log_size(run_dir: Path, log_name: str = LOG_FILE) -> int:
    """Bytes in the run's torchrun log now: where the next attempt's output starts."""
    try:
        return (run_dir / log_name).lstat().st_size
    except OSError:
        return 0


def describe(run_dir: Path, reason: str, *, since: int = 0, log_name: str = LOG_FILE) -> str:
    """``reason`` plus the failed rank, its exit code or signal and its last log lines.

    Reads the attempt's part of the torchrun log (from byte ``since``, its last
    TAIL_BYTES at most); returns ``reason`` unchanged when the log names no failed rank,
    or is no longer a regular file (the run's user owns the folder: a link or a FIFO put
    in its place is not read).
    """
    try:
        raw = run_files.tail_bounded(run_dir / log_name, since=since, max_bytes=TAIL_BYTES)
    except OSError:
        return reason
    text = raw.decode(errors="replace")
    found = _ROOT_CAUSE.search(text)
    if found is None:
        return reason
    rank, code = int(found["rank"]), int(found["code"])
    tail = rank_tail(text, int(found["local"]))
    last = f"; last lines: {' | '.join(tail)}" if tail else "; it printed nothing"
    return f"rank {rank} {exit_words(code)}{last} ({reason})"


def exit_words(code: int) -> str:
    """ "exited with code 3" or "killed by SIGKILL" (torchrun reports signals as -N)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def rank_tail(text: str, local_rank: int, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines a local rank printed, as torchrun echoed them."""
    prefix = f"[default{local_rank}]:"
    own = [ln[len(prefix) :].strip() for ln in text.splitlines() if ln.startswith(prefix)]
    return [ln[:120] for ln in own if ln][-lines:]


def clear_straggler_alarms(job: Job) -> int:
    """Clear the job's open straggler alarms (its run makes steps again); return how many."""
    open_alarms = list(
        Alarm.objects.filter(job=job, kind=AlarmKind.STRAGGLER, cleared_at__isnull=True)
    )
    for alarm in open_alarms:
        alarm.cleared_at, alarm.cleared_step = timezone.now(), job.last_step
        alarm.save(update_fields=["cleared_at", "cleared_step"])
        _publish(job, alarm, state="cleared")
    return len(open_alarms)


def raise_straggler_alarm(job: Job, *, stalled_s: float) -> Alarm:
    """Open a ``straggler`` alarm for a run that made no step for ``stalled_s`` seconds.

    Sent to the job's and tenant's pages like the alarms runs raise themselves.
    """
    alarm = Alarm.objects.create(
        job=job,
        kind=AlarmKind.STRAGGLER,
        step=job.last_step,
        value=stalled_s,
        threshold=settings.SYNCLANE_HANG_TIMEOUT_S,
        detail=f"no step for {stalled_s:.0f} s; the run is restarted",
        raised_at=timezone.now(),
    )
    _publish(job, alarm, state="raised")
    return alarm


def _publish(job: Job, alarm: Alarm, *, state: str) -> None:
    """Send the alarm to the job's, tenant's and cluster pages, as the ingest does."""
    message = {
        "type": "alarm",
        "job": job.pk,
        "tenant": job.tenant.slug,
        "data": {
            "kind": alarm.kind,
            "state": state,
            "step": alarm.step if state == "raised" else alarm.cleared_step,
            "value": alarm.value,
            "threshold": alarm.threshold,
            "detail": alarm.detail,
            "alarm_id": alarm.pk,
        },
    }
    for group in (job_group(job.pk), tenant_group(job.tenant_id), CLUSTER_GROUP):
        publish_on_commit(group, message)
