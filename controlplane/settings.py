"""Synclane settings: one env-driven module whose defaults run on one machine.

Every variable is documented in .env.example.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from controlplane.lib.env import database_from_url, env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
RUN_DIR = Path(env_str("SYNCLANE_RUN_DIR", str(BASE_DIR / "run")))
# Local state (SQLite file, Redis data, job folders) lives here; make sure it exists.
RUN_DIR.mkdir(parents=True, exist_ok=True)
(RUN_DIR / "static").mkdir(exist_ok=True)

SECRET_KEY = env_str("DJANGO_SECRET_KEY", "synclane-dev-only-secret-change-me")
DEBUG = env_bool("DJANGO_DEBUG", False)
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
    "rest_framework.authtoken",
    "controlplane.tenancy",
    "controlplane.jobs",
    "controlplane.telemetry",
    "controlplane.dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{RUN_DIR / 'synclane.sqlite3'}"), base_dir=BASE_DIR
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
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
# This node's slots and fabric bandwidth, registered by its Celery worker. Before any worker
# has registered, the cluster is taken to be this one node.
SYNCLANE_CLUSTER_SLOTS = env_int("SYNCLANE_CLUSTER_SLOTS", 4)
SYNCLANE_NODE_FABRIC_MBPS = env_int("SYNCLANE_NODE_FABRIC_MBPS", 1000)
SYNCLANE_NODE_TIMEOUT_S = env_float("SYNCLANE_NODE_TIMEOUT_S", 30.0)
# Least bandwidth pushed to a running job: a run paced at 0 would stall in its first collective.
SYNCLANE_MIN_ALLOCATION_MBPS = env_float("SYNCLANE_MIN_ALLOCATION_MBPS", 1.0)
SYNCLANE_MAX_WORLD_SIZE = env_int("SYNCLANE_MAX_WORLD_SIZE", 8)
SYNCLANE_MAX_STEPS = env_int("SYNCLANE_MAX_STEPS", 100_000)
SYNCLANE_MAX_RESTARTS = env_int("SYNCLANE_MAX_RESTARTS", 2)
SYNCLANE_CANCEL_GRACE_S = env_float("SYNCLANE_CANCEL_GRACE_S", 10.0)
SYNCLANE_HEARTBEAT_S = env_float("SYNCLANE_HEARTBEAT_S", 2.0)
SYNCLANE_HEARTBEAT_TIMEOUT_S = env_float("SYNCLANE_HEARTBEAT_TIMEOUT_S", 30.0)
SYNCLANE_CHECKPOINT_EVERY = env_int("SYNCLANE_CHECKPOINT_EVERY", 50)
SYNCLANE_SAMPLE_INTERVAL_S = env_float("SYNCLANE_SAMPLE_INTERVAL_S", 0.5)
SYNCLANE_JOBS_DIR = Path(env_str("SYNCLANE_JOBS_DIR", str(RUN_DIR / "jobs")))
SYNCLANE_DEMO_PASSWORD = env_str("SYNCLANE_DEMO_PASSWORD", "synclane-demo")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("SYNCLANE_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
