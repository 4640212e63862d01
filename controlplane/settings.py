"""Synclane settings: one env-driven module whose defaults run on one machine.

Every variable is documented in .env.example.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
from pathlib import Path

from csp.constants import NONE, SELF, UNSAFE_INLINE

from controlplane.lib import secret_key
from controlplane.lib.env import (
    EnvError,
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_labels,
    env_list,
    env_name,
    env_rate,
    env_str,
)
from controlplane.lib.error_shape import ERROR_COMPONENT as _ERROR_COMPONENT

BASE_DIR = Path(__file__).resolve().parent.parent
RUN_DIR = Path(env_str("SYNCLANE_RUN_DIR", str(BASE_DIR / "run")))
# Local state (SQLite file, Redis data, job folders) lives here; make sure it exists.
RUN_DIR.mkdir(parents=True, exist_ok=True)
(RUN_DIR / "static").mkdir(exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False)
# Per install (see lib/secret_key.py): outside DEBUG, no key or a placeholder refuses to start.
SECRET_KEY = secret_key.resolve(env_str("DJANGO_SECRET_KEY", ""), run_dir=RUN_DIR, debug=DEBUG)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list(
    "DJANGO_CSRF_TRUSTED_ORIGINS", ["http://127.0.0.1:8000", "http://localhost:8000"]
)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "controlplane.accounts",
    "controlplane.tenancy",
    "controlplane.jobs",
    "controlplane.bundles",
    "controlplane.telemetry",
    "controlplane.dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429.
    "axes.middleware.AxesMiddleware",
]

# --- HTTPS (production: set these behind TLS; `manage.py check --deploy` is then clean) -----
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# Behind a TLS-terminating proxy, trust its X-Forwarded-Proto (and only then).
if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Content-Security-Policy (django-csp): scripts and connections from this origin only; no
# inline script or handler anywhere (templates load static JS; tests/browser/test_csp.py).
# 'self' covers the same-origin ws:/wss: sockets in current browsers. Styles allow inline:
# Plotly injects <style> elements at run time (a blocked one breaks its hover and modebar).
# The API docs pages add a blob: worker for Redoc (controlplane/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL connections are pooled per process (at most this many; 0: a new connection per
# request and per task). Opening one cost the server a backend process each time, for every
# submit and every task; the ASGI server runs each request on a thread of its own, so a
# connection kept with its thread (CONN_MAX_AGE) would be lost with it, while a pool's is not.
SYNCLANE_DB_POOL_MAX = env_int("SYNCLANE_DB_POOL_MAX", 10)
DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{RUN_DIR / 'synclane.sqlite3'}"),
        base_dir=BASE_DIR,
        pool_max=SYNCLANE_DB_POOL_MAX,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# django-axes first: it refuses a locked-out login before any password is checked.
AUTHENTICATION_BACKENDS = [
    "controlplane.accounts.lockout.LockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = RUN_DIR / "static"
# Plotly is served from the plotly package itself (plotly/plotly.min.js): no CDN.
_PLOTLY_DIR = Path(importlib.util.find_spec("plotly").origin).parent / "package_data"  # type: ignore[union-attr,arg-type]
STATICFILES_DIRS = [BASE_DIR / "controlplane" / "dashboard" / "static", ("plotly", _PLOTLY_DIR)]
WHITENOISE_USE_FINDERS = True

# --- Redis, Celery, Channels -------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6399/0")

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("SYNCLANE_TASK_TIME_LIMIT_S", 120)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 10
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A Redis restart must not end the worker (it retries for as long as Redis is away) nor the
# runs it supervises (they do not need Redis; Celery 6 would cancel them by default).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Celery's Django fix-up closes a pool process's database connections before and after every
# task, and with a connection pool it closes the whole pool (prefork): a new connection per
# task. This lets a pool process keep them (it still recycles them every 2 x this many
# tasks); workers/tasks.py drops an unusable or expired one before each task instead.
CELERY_DB_REUSE_MAX = 1000

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 times reads out after 5 s by default, exactly channels_redis's
            # blocking-receive period: the race drops idle websockets. Give reads headroom.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 10}],
            "capacity": 1000,
            "expiry": 30,
        },
    }
}

# --- Synclane -------------------------------------------------------------------------
# The cluster before any worker has registered a node: this one machine with these slots.
SYNCLANE_CLUSTER_SLOTS = env_int("SYNCLANE_CLUSTER_SLOTS", 4)
# This host as a node, registered by its Celery worker (workers.supervisor.node): its name
# (default: the host name; its worker also consumes the queue node.<name>), slots (0: detect,
# GPUs if torch sees any, else CPU cores), labels (gpu=h200,zone=a), the address other nodes
# reach it on (default: its host name) and its fabric bandwidth.
SYNCLANE_NODE_NAME = env_name("SYNCLANE_NODE_NAME", "")
SYNCLANE_NODE_SLOTS = env_int("SYNCLANE_NODE_SLOTS", 0)
SYNCLANE_NODE_LABELS = env_labels("SYNCLANE_NODE_LABELS", {})
SYNCLANE_NODE_ADDRESS = env_str("SYNCLANE_NODE_ADDRESS", "").strip()
SYNCLANE_NODE_FABRIC_MBPS = env_int("SYNCLANE_NODE_FABRIC_MBPS", 1000)
if SYNCLANE_NODE_SLOTS < 0:
    raise EnvError(f"SYNCLANE_NODE_SLOTS={SYNCLANE_NODE_SLOTS} must be 0 (detect) or more")
if SYNCLANE_NODE_FABRIC_MBPS < 0:
    raise EnvError(f"SYNCLANE_NODE_FABRIC_MBPS={SYNCLANE_NODE_FABRIC_MBPS} must be 0 or more")
if any(c.isspace() for c in SYNCLANE_NODE_ADDRESS) or len(SYNCLANE_NODE_ADDRESS) > 255:
    raise EnvError(f"SYNCLANE_NODE_ADDRESS={SYNCLANE_NODE_ADDRESS!r} is not a host name or IP")
# A node silent (no worker heartbeat) for longer than this is lost: its slots no longer count
# and its jobs are requeued.
SYNCLANE_NODE_LOST_AFTER_S = env_float("SYNCLANE_NODE_LOST_AFTER_S", 30.0)
# A run across nodes: the ports node rank 0 may host its c10d rendezvous on ("29400-29499"
# where a firewall lets only those through; empty: any free port), and the emulated link
# its collectives are paced at (Mbit/s; nodes on one machine talk over loopback, so the
# benchmarks and the demo set it; 0: none, as on real hosts).
SYNCLANE_RDZV_PORTS = env_str("SYNCLANE_RDZV_PORTS", "").strip()
if SYNCLANE_RDZV_PORTS and not re.fullmatch(r"\d{1,5}(-\d{1,5})?", SYNCLANE_RDZV_PORTS):
    raise EnvError(f"SYNCLANE_RDZV_PORTS={SYNCLANE_RDZV_PORTS!r} must be PORT or LOW-HIGH")
SYNCLANE_INTERNODE_LINK_MBPS = env_float("SYNCLANE_INTERNODE_LINK_MBPS", 0.0) or None
# Least bandwidth pushed to a running job: a run paced at 0 would stall in its first collective.
SYNCLANE_MIN_ALLOCATION_MBPS = env_float("SYNCLANE_MIN_ALLOCATION_MBPS", 1.0)
SYNCLANE_MAX_WORLD_SIZE = env_int("SYNCLANE_MAX_WORLD_SIZE", 8)
SYNCLANE_MAX_STEPS = env_int("SYNCLANE_MAX_STEPS", 100_000)
SYNCLANE_MAX_RESTARTS = env_int("SYNCLANE_MAX_RESTARTS", 2)
SYNCLANE_CANCEL_GRACE_S = env_float("SYNCLANE_CANCEL_GRACE_S", 10.0)
SYNCLANE_HEARTBEAT_S = env_float("SYNCLANE_HEARTBEAT_S", 2.0)
SYNCLANE_HEARTBEAT_TIMEOUT_S = env_float("SYNCLANE_HEARTBEAT_TIMEOUT_S", 30.0)
# A run's supervisor lease (Redis) lives this long unless renewed (every heartbeat): after a
# worker dies, its runs are taken over once the lease has lapsed.
SYNCLANE_LEASE_TTL_S = env_float("SYNCLANE_LEASE_TTL_S", 10.0)
# An admitted job whose launch has not taken its lease after this long goes back to the queue.
SYNCLANE_LAUNCH_TIMEOUT_S = env_float("SYNCLANE_LAUNCH_TIMEOUT_S", 30.0)
# A launch sent back to the queue by a platform fault (Redis away, the control plane
# unreachable) is retried after base * 2**(n-1) seconds for its n-th fault in a row, at most
# max (0 turns it off). The cap bounds the wait once the fault is over.
SYNCLANE_LAUNCH_BACKOFF_S = env_float("SYNCLANE_LAUNCH_BACKOFF_S", 2.0)
SYNCLANE_LAUNCH_BACKOFF_MAX_S = env_float("SYNCLANE_LAUNCH_BACKOFF_MAX_S", 60.0)
# A run with no new step for this long raises a straggler alarm and is restarted as failed.
SYNCLANE_HANG_TIMEOUT_S = env_float("SYNCLANE_HANG_TIMEOUT_S", 300.0)
# Wait before restart n: base * 2**(n-1), at most the cap.
SYNCLANE_RESTART_BACKOFF_S = env_float("SYNCLANE_RESTART_BACKOFF_S", 1.0)
SYNCLANE_RESTART_BACKOFF_MAX_S = env_float("SYNCLANE_RESTART_BACKOFF_MAX_S", 60.0)
SYNCLANE_CHECKPOINT_EVERY = env_int("SYNCLANE_CHECKPOINT_EVERY", 50)
# The supervisor hashes at most this many MB of a run's checkpoints (files in a folder the
# run's user owns) looking for the one to resume from: a bigger one is not resumed from.
SYNCLANE_CHECKPOINT_MAX_MB = env_int("SYNCLANE_CHECKPOINT_MAX_MB", 8192)
# Preemption without thrash (controlplane.scheduling.types.Options): a job admitted less than
# this long ago is only preempted by a critical job; a job evicted this many times yields only
# to a newer, higher-priority job; an evicted job waits base * 2**(evictions-1) seconds (at most
# max) before it may run again; the cohorts named here admit in Kueue's classical order.
SYNCLANE_MIN_RUN_TIME_S = env_float("SYNCLANE_MIN_RUN_TIME_S", 0.0)
SYNCLANE_EVICTION_LIMIT = env_int("SYNCLANE_EVICTION_LIMIT", 3)
SYNCLANE_BACKOFF_BASE_S = env_float("SYNCLANE_BACKOFF_BASE_S", 0.0)
SYNCLANE_BACKOFF_MAX_S = env_float("SYNCLANE_BACKOFF_MAX_S", 600.0)
SYNCLANE_CLASSICAL_COHORTS = env_list("SYNCLANE_CLASSICAL_COHORTS", [])
# A worker process keeps its scheduling queues between passes and reads only what changed
# (controlplane.jobs.queue_state); it reads the whole queue again at least this often.
SYNCLANE_SCHEDULE_REBUILD_S = env_float("SYNCLANE_SCHEDULE_REBUILD_S", 60.0)
SYNCLANE_SAMPLE_INTERVAL_S = env_float("SYNCLANE_SAMPLE_INTERVAL_S", 0.5)
SYNCLANE_JOBS_DIR = Path(env_str("SYNCLANE_JOBS_DIR", str(RUN_DIR / "jobs")))
# A submit's Idempotency-Key is remembered (per user) this long; a retry within it gets the
# first answer again instead of a second job.
SYNCLANE_IDEMPOTENCY_WINDOW_S = env_float("SYNCLANE_IDEMPOTENCY_WINDOW_S", 24 * 3600.0)
# Most jobs one request to /api/v1/jobs/batch/ may submit (all or none).
SYNCLANE_SUBMIT_BATCH_MAX = env_int("SYNCLANE_SUBMIT_BATCH_MAX", 500)
# Per-tenant storage quota (MB) over its jobs' artifacts; at or over it, new submits are
# refused with a 400 naming it. 0: no limit.
SYNCLANE_TENANT_STORAGE_MB = env_int("SYNCLANE_TENANT_STORAGE_MB", 5120)

# --- Code bundles and launching tenant code ---
SYNCLANE_STORAGE_DIR = Path(env_str("SYNCLANE_STORAGE_DIR", str(RUN_DIR / "storage")))
SYNCLANE_BUNDLE_MAX_FILES = env_int("SYNCLANE_BUNDLE_MAX_FILES", 5_000)
SYNCLANE_BUNDLE_MAX_BYTES = env_int("SYNCLANE_BUNDLE_MAX_BYTES", 200 * 1024 * 1024)
SYNCLANE_BUNDLE_MAX_RATIO = env_float("SYNCLANE_BUNDLE_MAX_RATIO", 200.0)
SYNCLANE_BUNDLE_TTL_S = env_int("SYNCLANE_BUNDLE_TTL_S", 30 * 24 * 3600)
SYNCLANE_BUNDLE_TOKEN_TTL_S = env_int("SYNCLANE_BUNDLE_TOKEN_TTL_S", 3600)
SYNCLANE_BUNDLE_CACHE_DIR = Path(
    env_str("SYNCLANE_BUNDLE_CACHE_DIR", str(RUN_DIR / "bundle-cache"))
)
SYNCLANE_CONTROL_URL = env_str("SYNCLANE_CONTROL_URL", "http://127.0.0.1:8000").rstrip("/")
SYNCLANE_RUN_AS = env_str("SYNCLANE_RUN_AS", "")
SYNCLANE_RUN_AS_UIDS = env_int("SYNCLANE_RUN_AS_UIDS", 1)
SYNCLANE_RUN_PYTHON = env_str("SYNCLANE_RUN_PYTHON", "")
SYNCLANE_DEMO_PASSWORD = env_str("SYNCLANE_DEMO_PASSWORD", "synclane-demo")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.accounts.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON only, nesting bounded: every field arrives with the type the client gave it.
    "DEFAULT_PARSER_CLASSES": ["controlplane.lib.parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Every error body is {"detail": "...", "<field>": ["reason", ...]} (lib/api_errors.py).
    "EXCEPTION_HANDLER": "controlplane.lib.api_errors.exception_handler",
}

# OpenAPI 3 at /api/schema/; Swagger UI and Redoc are served from drf-spectacular-sidecar's
# static files (no CDN).
SPECTACULAR_SETTINGS = {
    "TITLE": "Synclane API",
    "DESCRIPTION": "Multi-tenant control plane for distributed PyTorch training. "
    "Authenticate with `Authorization: Token <key>` (POST /api/v1/auth/token/) or a session. "
    'Errors are {"detail": message, "<field>": [reasons]}.',
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "APPEND_COMPONENTS": {"schemas": {"Error": _ERROR_COMPONENT}},
    "ENUM_NAME_OVERRIDES": {"JobStatusEnum": "controlplane.jobs.choices.JobStatus"},
}

# /metrics (Prometheus) answers only `Authorization: Bearer <this>`; empty means the
# endpoint is closed (404) — set it, or keep /metrics behind a network rule (docs/operations.md).
SYNCLANE_METRICS_TOKEN = env_str("SYNCLANE_METRICS_TOKEN", "")
# --- Logins and API tokens ---------------------------------------------------------------
# Tokens expire after this many days unless created with a shorter or longer life (max 365).
SYNCLANE_TOKEN_TTL_DAYS = env_int("SYNCLANE_TOKEN_TTL_DAYS", 30)
# Login attempts (login page and token endpoint) per client address and per username.
SYNCLANE_LOGIN_RATE_PER_IP = env_rate("SYNCLANE_LOGIN_RATE_PER_IP", "30/minute")
SYNCLANE_LOGIN_RATE_PER_USER = env_rate("SYNCLANE_LOGIN_RATE_PER_USER", "10/minute")
# After this many failed logins for one username from one address, that pair is locked out
# (even with the right password) for SYNCLANE_LOGIN_LOCKOUT_MINUTES.
AXES_FAILURE_LIMIT = env_int("SYNCLANE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env_float("SYNCLANE_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "controlplane.accounts.lockout.lockout_response"
# Axes records failures; successful logins need no table of their own.
AXES_DISABLE_ACCESS_LOG = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("SYNCLANE_LOG_LEVEL", "INFO")},
    # axes.apps logs its configuration at every start of every process.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes.apps": {"level": "WARNING"}},
}
