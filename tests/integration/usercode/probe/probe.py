"""Inside a job: try what the job must not do; write each outcome to probe.json.

    torchrun ... probe.py OTHER_JOB_ID OTHER_RUN_DIR PATH...

Each attempt is recorded as "refused: <error>" or "ALLOWED: <result>". The job's own
telemetry is sent through the runtime, and its own allocation key read, as a control.
Besides the credential it was given, it tries the same Redis as its ``default`` user (the
one with every right) with no password and with the job's own password.
"""

import json
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redis
from synclane import Reporter

other_job, other_run_dir, *paths = sys.argv[1:]
own_job = os.environ["SYNCLANE_JOB_ID"]
client = redis.Redis.from_url(os.environ["SYNCLANE_REDIS_URL"], socket_timeout=5)
server = urlsplit(os.environ["SYNCLANE_REDIS_URL"])
own_password = unquote(server.password or "")


def as_default(password):
    """A client of the same host:port as ``default`` (AUTH default <password>, or no AUTH)."""
    username = "default" if password is not None else None
    return redis.Redis(
        host=server.hostname,
        port=server.port,
        username=username,
        password=password,
        socket_timeout=5,
    )


def attempt(what):
    try:
        return f"ALLOWED: {what()!r}"[:200]
    except Exception as exc:  # noqa: BLE001 - every failure is the expected outcome
        return f"refused: {type(exc).__name__}: {exc}"[:200]


def read_tree(root):
    return [p.read_bytes()[:10] for p in Path(root).rglob("*") if p.is_file()] or os.listdir(root)


results = {
    "other stream": attempt(lambda: client.xadd(f"synclane:telemetry:{other_job}", {"type": "x"})),
    "other allocation": attempt(lambda: client.get(f"synclane:alloc:{other_job}")),
    "celery queue": attempt(lambda: client.lpush("celery", "{}")),
    "flushall": attempt(lambda: client.flushall()),
    "keys": attempt(lambda: client.keys("*")),
    "config": attempt(lambda: client.config_get("*")),
    "acl": attempt(lambda: client.acl_list()),
    "other run folder": attempt(lambda: read_tree(other_run_dir)),
    "own allocation": attempt(lambda: client.get(f"synclane:alloc:{own_job}")),
    # KEYS, not FLUSHALL: if the door were open, the report shows it without wiping the stack.
    "default, no password": attempt(lambda: as_default(None).keys("*")[:5]),
    "default, own password": attempt(lambda: as_default(own_password).keys("*")[:5]),
    "own password, no user": attempt(
        lambda: redis.Redis(
            host=server.hostname, port=server.port, password=own_password, socket_timeout=5
        ).keys("*")[:5]
    ),
    "env": sorted(k for k in os.environ if "DATABASE" in k or "SECRET" in k or k == "REDIS_URL"),
}
for path in paths:
    results[f"read {path}"] = attempt(
        lambda p=path: read_tree(p) if Path(p).is_dir() else Path(p).read_bytes()[:10]
    )
reporter = Reporter.from_env()
reporter.log({"loss": 1.0, "probe": 1}, step=1)
reporter.close()
Path(os.environ["SYNCLANE_RUN_DIR"], "probe.json").write_text(json.dumps(results, indent=1))
print(json.dumps(results, indent=1), flush=True)
