"""Strata's one settings module, driven by the environment.

Local defaults work on a developer machine of this project's kind (PostgreSQL and Redis on
127.0.0.1, trust auth). With ``DEBUG`` off, the secret key and allowed hosts must come from the
environment and the production hardening below applies (``manage.py check --deploy`` is clean).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from broker_agent.contract.signing import read_secret_file
from config.env import env_bool, env_float, env_int, env_list, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
RUN_DIR = Path(env_str("STRATA_RUN_DIR", str(BASE_DIR / ".run")))

# Off unless asked for (``DEBUG=1``: ``make dev``, the test suite's settings): a process started
# without it gets the production hardening below.
DEBUG = env_bool("DEBUG", False)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/strata"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DATABASE_URL = env_str("DATABASE_URL", DEFAULT_DATABASE_URL)
REDIS_URL = env_str("REDIS_URL", DEFAULT_REDIS_URL)
# The largest request body accepted (413 above it, before it is read); Django's own form limit
# follows it.
STRATA_MAX_BODY_BYTES = env_int("STRATA_MAX_BODY_BYTES", 2 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = STRATA_MAX_BODY_BYTES
# Shown in the footer and by /api/v1/health; apps read it here, never from the config package.
STRATA_VERSION = "0.1.0"

_INSECURE_DEV_KEY = "strata-insecure-development-key-do-not-use-in-production-0123456789"
_LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
# Neither DEBUG nor a key, but the key make run generated exists: a shell beside make run
# (manage.py create_user, verify_audit) runs with make run's key and loopback hosts, as it reads
# its audit key below.
_MAKE_RUN_KEY = RUN_DIR / "secret-key"
_BESIDE_MAKE_RUN = not DEBUG and not env_secret("SECRET_KEY") and _MAKE_RUN_KEY.is_file()
if _BESIDE_MAKE_RUN:
    SECRET_KEY = read_secret_file(str(_MAKE_RUN_KEY)) or ""
else:
    SECRET_KEY = env_secret("SECRET_KEY", _INSECURE_DEV_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", _LOOPBACK_HOSTS if DEBUG or _BESIDE_MAKE_RUN else [])
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when DEBUG is off")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_filters",
    "ninja",  # serves Swagger UI from its own static files (not a CDN) at /api/v1/docs
    "pgtrigger",
    "axes",
    "audit",
    "accounts",
    "console",
    "workflows",
    "spark_tasks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # 400 for a NUL byte anywhere in the request, 413 for a body over STRATA_MAX_BODY_BYTES.
    "config.edges.InputEdgesMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The access gate: a Strata role for every page and API route unless listed as public.
    "config.middleware.StrataAccessMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Login lockout (django-axes): last, as its documentation asks.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
                "console.context_processors.strata",
            ],
        },
    }
]

DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
}
# The console's connections: no JIT - its queries read a page of rows or write once, and
# PostgreSQL compiled one whose estimate passed jit_above_cost at fleet size (a 10,000-partition
# topic's per-broker replica counts: 90 ms of compiling for a 30 ms query, #17). And the random
# page cost of data held in memory or on SSD (1.1, not 4 for spinning disks): priced for disks,
# that query's plan without a parallel worker read all 3,000,000 replicas (1.1 s, not 30 ms).
_db_options = DATABASES["default"].setdefault("OPTIONS", {})
_db_options["options"] = (
    f"{_db_options.get('options', '')} -c jit=off -c random_page_cost=1.1".strip()
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Login lockout (django-axes): after STRATA_LOGIN_FAILURE_LIMIT failed sign-ins from one
# address for one user name, that pair is refused (429, a page that says until when) for
# STRATA_LOGIN_COOLOFF_MINUTES. The pair, not the address alone: a team behind one NAT must not
# lock each other out by a typo; a client that rotates user names is bounded by the audit's
# denial counting (accounts/signals.py) rather than locked. Audited once per lockout.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("STRATA_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env_float("STRATA_LOGIN_COOLOFF_MINUTES", 15.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A lock ends STRATA_LOGIN_COOLOFF_MINUTES after it began; tries while locked do not extend it
# (the page can say until when, and a guesser still gets at most LIMIT tries per cool-off).
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = RUN_DIR / "static"
if DEBUG:  # WhiteNoise serves from the finders in DEBUG, but warns when STATIC_ROOT is missing
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# --- Celery --------------------------------------------------------------------------------
# Workflow state lives in PostgreSQL; Celery only carries primary keys. Tasks acknowledge late
# and are requeued when a worker dies, so every task must be idempotent (see CONVENTIONS.md).
CELERY_TASK_HARD_TIME_LIMIT = env_int("CELERY_TASK_HARD_TIME_LIMIT", 3600)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 3300)
CELERY_BROKER_URL = REDIS_URL
# kombu's Redis transport with the restart fix of config/broker_transport.py (a worker no longer
# exits when Redis restarts); plain redis:// only: rediss:// and sentinel keep kombu's own.
CELERY_BROKER_TRANSPORT = (
    "config.broker_transport:Transport" if REDIS_URL.startswith("redis://") else None
)
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = CELERY_TASK_HARD_TIME_LIMIT
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT
CELERY_TASK_TRACK_STARTED = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Above the longest task's hard limit, so Redis never redelivers a task that is still running.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_HARD_TIME_LIMIT + 600}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = CELERY_BROKER_TRANSPORT_OPTIONS
CELERY_TASK_DEFAULT_QUEUE = "strata"
CELERY_BEAT_SCHEDULE = {
    "heartbeat": {
        "task": "console.tasks.heartbeat",
        "schedule": env_float("STRATA_HEARTBEAT_SECONDS", 30.0),
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(RUN_DIR / "celerybeat-schedule")
# Every worker process writes its own heartbeat row ("worker:<node name>") this often, from a
# thread of its own; /api/v1/health and the overview count the workers whose row is at most
# STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS old (no broadcast to the workers on a web request).
STRATA_WORKER_HEARTBEAT_SECONDS = env_float("STRATA_WORKER_HEARTBEAT_SECONDS", 15.0)
STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS = env_float("STRATA_WORKER_HEARTBEAT_MAX_AGE_SECONDS", 60.0)

# --- Audit: repeated denials (audit/denials.py) ------------------------------------------------
# The first of identical refused requests in this window is an audit event; the rest are counted
# and written as one event (extra.repeats) when the window closes.
STRATA_AUDIT_DENIAL_WINDOW_SECONDS = env_int("STRATA_AUDIT_DENIAL_WINDOW_SECONDS", 60)
CELERY_BEAT_SCHEDULE["audit-flush-denials"] = {
    "task": "audit.flush_denials",
    "schedule": float(STRATA_AUDIT_DENIAL_WINDOW_SECONDS),
}

# --- Audit: key and checkpoints (audit/keys.py, audit/checkpoints.py) --------------------------
# The chain is an HMAC chain under this key (one per line in the file; the first signs). Kept
# outside PostgreSQL: make run generates .run/audit-key. Unset: events are written unkeyed.
# Unset and make run's generated key exists: that key, so manage.py commands run beside make run
# (verify_audit, audit_checkpoint) verify what its processes wrote.
STRATA_AUDIT_KEYS = env_secret("STRATA_AUDIT_KEY", "") or (
    (RUN_DIR / "audit-key").read_text().strip() if (RUN_DIR / "audit-key").is_file() else ""
)
# Signed checkpoints (n, head seq + hash, event count), numbered without gaps, are written every
# STRATA_AUDIT_CHECKPOINT_SECONDS when the head moved: to the object store (the external series,
# STRATA_AUDIT_CHECKPOINT_STORE=s3://BUCKET/PREFIX; empty: $STRATA_REMOTE_STORE/audit-checkpoints;
# "off": none), with COMPLIANCE retention of STRATA_AUDIT_CHECKPOINT_RETAIN_DAYS when the bucket
# has Object Lock, and to the local directory (empty: none). verify_audit checks the chain
# against both series and the series against each other (audit/checkpoints.py).
STRATA_AUDIT_CHECKPOINT_STORE = env_str("STRATA_AUDIT_CHECKPOINT_STORE", "")
STRATA_AUDIT_CHECKPOINT_RETAIN_DAYS = env_int("STRATA_AUDIT_CHECKPOINT_RETAIN_DAYS", 400)
STRATA_AUDIT_CHECKPOINT_DIR = env_str(
    "STRATA_AUDIT_CHECKPOINT_DIR", str(RUN_DIR / "audit-checkpoints")
)
STRATA_AUDIT_CHECKPOINT_SECONDS = env_float("STRATA_AUDIT_CHECKPOINT_SECONDS", 300.0)
#: How many local checkpoint files are kept (the newest; older ones are removed), and how many of
#: the newest external ones verify_audit reads (all are listed).
STRATA_AUDIT_CHECKPOINT_KEEP = env_int("STRATA_AUDIT_CHECKPOINT_KEEP", 1000)
CELERY_BEAT_SCHEDULE["audit-checkpoint"] = {
    "task": "audit.write_checkpoint",
    "schedule": STRATA_AUDIT_CHECKPOINT_SECONDS,
}

# --- Console: cluster sync (console/) --------------------------------------------------------
# Every registered cluster is synced from its controller and agents this often (agent events
# trigger an immediate sync on top, through the signed /agent-events/ webhook).
STRATA_SYNC_INTERVAL_SECONDS = env_float("STRATA_SYNC_INTERVAL_SECONDS", 10.0)
# PostgreSQL work_mem of a sync's transaction (SET LOCAL): its joins of millions of staged
# replicas sort or hash in memory instead of on disk (the server's default is 4MB). A first
# sync of 1,000,000 partitions hashes them in ~200 MB (with the default hash_mem_multiplier
# of 2); at 128MB that hash spilled to disk in two batches (14.1 s -> 12.4 s, #17).
STRATA_SYNC_WORK_MEM = env_str("STRATA_SYNC_WORK_MEM", "256MB")
# /metrics: per-topic KIP-963 series for at most this many tiered topics per cluster (the most
# remote bytes); cluster totals always, every topic with /metrics?topics=all.
STRATA_METRICS_TOPIC_LIMIT = env_int("STRATA_METRICS_TOPIC_LIMIT", 100)
CELERY_BEAT_SCHEDULE["console-sync"] = {
    "task": "console.tasks.sync_all_clusters",
    "schedule": STRATA_SYNC_INTERVAL_SECONDS,
}

# --- Console: history (console/history.py) -----------------------------------------------------
# The sync samples every log dir and tiered topic at most this often (0: no history); samples are
# rolled into hourly peaks this often; raw samples are kept 24 hours, hourly ones 30 days. A
# tiered topic is sampled only when its figures changed, or when its last sample is the
# keep-alive old (at most 30 minutes).
STRATA_HISTORY_SAMPLE_SECONDS = env_float("STRATA_HISTORY_SAMPLE_SECONDS", 30.0)
STRATA_HISTORY_KEEPALIVE_SECONDS = env_float("STRATA_HISTORY_KEEPALIVE_SECONDS", 300.0)
STRATA_HISTORY_ROLLUP_SECONDS = env_float("STRATA_HISTORY_ROLLUP_SECONDS", 600.0)
CELERY_BEAT_SCHEDULE["console-history-rollup"] = {
    "task": "console.tasks.roll_up_history",
    "schedule": STRATA_HISTORY_ROLLUP_SECONDS,
}

# --- Spark ---------------------------------------------------------------------------------
SPARK_MASTER = env_str("SPARK_MASTER", "local[2]")
SPARK_WORK_DIR = Path(env_str("SPARK_WORK_DIR", str(RUN_DIR / "spark")))
SPARK_DRIVER_MEMORY = env_str("SPARK_DRIVER_MEMORY", "1g")
# Extra JVM options of the driver (local mode: the executors too), after Strata's own tmpdir.
SPARK_DRIVER_JAVA_OPTIONS = env_str("SPARK_DRIVER_JAVA_OPTIONS", "")
SPARK_JOB_TIMEOUT_SECONDS = env_int("SPARK_JOB_TIMEOUT_SECONDS", 3000)
# A Spark run's task runs up to two spark-submits (plan, then delete) plus metadata calls.
SPARK_TASK_HARD_TIME_LIMIT = SPARK_JOB_TIMEOUT_SECONDS * 2 + 420
# Redis must never redeliver a task that is still running: stay above the longest hard limit.
CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = (
    max(CELERY_TASK_HARD_TIME_LIMIT, SPARK_TASK_HARD_TIME_LIMIT) + 600
)
# The jobs reach a cluster's remote-log metadata through its broker agents (controller URL and
# secret from console's Cluster registration; see spark_tasks/agent_remote.py).
SPARK_REMOTE_METADATA = env_str("SPARK_REMOTE_METADATA", "spark_tasks.agent_remote.for_cluster")
# Unregistered clusters: {name: {"controller_url": ..., "secret_ref": "/path" | "env:NAME"}};
# and remote store roots ({name: "s3://BUCKET/PREFIX"}) for clusters that are not simulated.
SPARK_CLUSTER_ENDPOINTS: dict[str, dict[str, str]] = {}
SPARK_REMOTE_ROOTS: dict[str, str] = {}
CELERY_BEAT_SCHEDULE["spark-retention"] = {
    "task": "spark_tasks.schedule_job",
    "schedule": crontab(minute=5),  # hourly
    "args": ("retention",),
}
CELERY_BEAT_SCHEDULE["spark-orphans"] = {
    "task": "spark_tasks.schedule_job",
    "schedule": crontab(hour=3, minute=15),  # daily
    "args": ("orphans",),
}
CELERY_BEAT_SCHEDULE["spark-storage-report"] = {
    "task": "spark_tasks.schedule_job",
    "schedule": crontab(hour=0, minute=30),  # daily
    "args": ("storage_report",),
}
# Supervision (spark_tasks/tasks.py): a run's heartbeat is renewed this often while a process
# works on it; a RUNNING run whose heartbeat is older than SPARK_RUN_LOST_AFTER_SECONDS is failed
# as lost by the reaper, which beat runs every SPARK_REAP_INTERVAL_SECONDS.
SPARK_HEARTBEAT_SECONDS = env_float("SPARK_HEARTBEAT_SECONDS", 5.0)
SPARK_RUN_LOST_AFTER_SECONDS = env_float("SPARK_RUN_LOST_AFTER_SECONDS", 120.0)
CELERY_BEAT_SCHEDULE["spark-reap-stale-runs"] = {
    "task": "spark_tasks.reap_stale_runs",
    "schedule": env_float("SPARK_REAP_INTERVAL_SECONDS", 60.0),
}
# A finished run's files (inputs, plan, deleted/, log) are kept this many days; the run's row,
# summary and audit events are kept for ever.
SPARK_RUN_FILES_DAYS = env_int("SPARK_RUN_FILES_DAYS", 14)
CELERY_BEAT_SCHEDULE["spark-prune-run-files"] = {
    "task": "spark_tasks.prune_run_files",
    "schedule": crontab(hour=4, minute=45),  # daily
}

# --- Workflows, approvals, audit (workflows/) ------------------------------------------------
# Each workflow kind declares the approvals it needs (disable_tiering: 2 with policy delete,
# remote_purge: what disable_tiering with policy delete needs, recover_log_dir: 2 with mode
# remove, else 1); kinds that declare none need
# STRATA_APPROVALS_DEFAULT. A site overrides a kind here: {"kind": {"approvals": N,
# "when": {"param=value": M}}} (the first matching "when" wins, then "approvals").
STRATA_APPROVALS_DEFAULT = env_int("STRATA_APPROVALS_DEFAULT", 1)
# How long latest-tiered (ListOffsets -5) must stand still for a retain disablement on a kafka
# cluster to count as "copying stopped": one remote log manager task interval (Kafka's
# remote.log.manager.task.interval.ms, 30 s by default) or more.
STRATA_TIER_COPY_QUIET_SECONDS = env_float("STRATA_TIER_COPY_QUIET_SECONDS", 30.0)
STRATA_APPROVAL_POLICY: dict[str, dict] = {}
STRATA_APPROVER_ROLE = env_str("STRATA_APPROVER_ROLE", "approver")  # an accounts.roles.Role
STRATA_APPROVAL_TTL_HOURS = env_float("STRATA_APPROVAL_TTL_HOURS", 24.0)
# A run renews its lease at every step boundary and progress report; the reconciler resumes a
# running workflow whose lease expired (its worker died).
STRATA_WORKFLOW_LEASE_SECONDS = env_int("STRATA_WORKFLOW_LEASE_SECONDS", 120)
STRATA_RECONCILE_SECONDS = env_float("STRATA_RECONCILE_SECONDS", 30.0)
STRATA_STEP_RETRY_BASE_SECONDS = env_float("STRATA_STEP_RETRY_BASE_SECONDS", 2.0)
STRATA_STEP_RETRY_MAX_SECONDS = env_float("STRATA_STEP_RETRY_MAX_SECONDS", 300.0)
CELERY_BEAT_SCHEDULE["workflows-reconcile"] = {
    "task": "workflows.tasks.reconcile_workflows",
    "schedule": STRATA_RECONCILE_SECONDS,
}
# A plan pending approval has its information (bytes, counts: never hashed) re-read this often;
# if its actions changed meanwhile, the approvals are voided and the page shows the diff.
STRATA_PLAN_REFRESH_SECONDS = env_float("STRATA_PLAN_REFRESH_SECONDS", 60.0)
CELERY_BEAT_SCHEDULE["workflows-refresh-plans"] = {
    "task": "workflows.tasks.refresh_plans",
    "schedule": max(5.0, STRATA_PLAN_REFRESH_SECONDS / 2),
}
# Sets the audit scope (context web/api, actor) for the request; after authentication.
MIDDLEWARE += ["audit.middleware.AuditScopeMiddleware"]

# --- Logging -------------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Production hardening (DEBUG off) ---------------------------------------------------------
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # Off only where the site is served over plain HTTP on loopback (make run sets it).
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("STRATA_SECURE_COOKIES", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
    X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
