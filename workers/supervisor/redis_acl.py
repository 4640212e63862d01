"""A Redis ACL user per job: the only Redis credential a run is given.

It may append to the job's telemetry stream, read the job's allocation key and subscribe
to the job's allocation channel; nothing else (another job's keys, the Celery queues,
FLUSHALL, KEYS, CONFIG, ACL are refused with NOPERM). The supervisor registers the
stream with the ingest itself, so the run needs no write to the shared set of streams.
Needs Redis 6+ with ACLs, and a control-plane connection allowed to run ACL SETUSER.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from workers.runtime import protocol

# SELECT: a REDIS_URL naming a database other than 0 makes the client select it on connect.
# Key patterns hold in every database, so it opens nothing beyond the job's own key names.
COMMANDS = ("-@all", "+xadd", "+get", "+subscribe", "+unsubscribe", "+ping", "+select")


_USERNAME = re.compile(r"^synclane-job-([0-9]+)$")


def username(job_id: int) -> str:
    return f"synclane-job-{job_id}"


def job_ids_with_users(client: redis.Redis) -> list[int]:
    """The job ids that have a run user in Redis now (other users are not ours: ignored)."""
    found = []
    for name in client.acl_users():
        text = name.decode() if isinstance(name, bytes) else str(name)
        if match := _USERNAME.match(text):
            found.append(int(match.group(1)))
    return sorted(found)


def create_job_user(client: redis.Redis, job_id: int, server_url: str) -> JobCredential:
    """Create (or reset) job ``job_id``'s ACL user with a new random password.

    Also adds the job's stream to the ingest's set of active streams. Returns the
    credential; its ``url`` is what the run connects with.
    """
    credential = JobCredential(job_id, secrets.token_urlsafe(32), server_url)
    credential.apply(client)
    return credential


@dataclass(frozen=True)
class JobCredential:
    """A run's Redis user and password, kept by its supervisor for the run's lifetime."""

    job_id: int
    password: str
    server_url: str

    @property
    def url(self) -> str:
        return with_credentials(self.server_url, username(self.job_id), self.password)

    def apply(self, client: redis.Redis) -> None:
        client.acl_setuser(
            username(self.job_id),
            enabled=True,
            reset=True,
            passwords=[f"+{self.password}"],
            reset_keys=True,
            keys=[
                protocol.telemetry_stream(self.job_id),
                protocol.allocation_key(self.job_id),
            ],
            reset_channels=True,
            channels=[protocol.allocation_channel(self.job_id)],
            commands=list(COMMANDS),
        )
        client.sadd(protocol.ACTIVE_STREAMS_KEY, str(self.job_id))

    def restore(self, client: redis.Redis) -> bool:
        """Re-create the user if Redis lost it (a restart keeps no ACL users).

        The password is the same, so the run's reporter gets back in on its next
        reconnect. Returns True if the user had to be re-created.
        """
        if client.acl_getuser(username(self.job_id)) is not None:
            return False
        self.apply(client)
        return True


def delete_job_user(client: redis.Redis, job_id: int) -> None:
    """Delete the job's ACL user (its open connections are closed by Redis). Idempotent."""
    client.acl_deluser(username(job_id))


def with_credentials(url: str, user: str, password: str) -> str:
    """``url`` with its user and password replaced."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
