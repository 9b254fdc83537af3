"""Settings of the test suite (and of the workers and commands it starts): production settings
plus the test-only app (``noop_check``, the fault injector), read with ``DEBUG=1`` unless the
environment says otherwise (the development key and loopback hosts; pytest-django still runs each
test with ``settings.DEBUG`` off). The variable is set, not passed: the processes the suite
starts read the same."""

import os
from pathlib import Path

os.environ.setdefault("DEBUG", "1")
# The suite's Spark jobs are small and short: a JVM that compiles with C1 only and collects with
# the serial collector spends about 40% less CPU on each (measured: 15 s -> 9 s a job on 2 cores)
# than one warming up C2 for a long run. Semantics are the JVM's either way; production keeps the
# defaults (SPARK_DRIVER_JAVA_OPTIONS empty). Set in the environment so the workers and
# commands the suite starts run their jobs the same way.
os.environ.setdefault("SPARK_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

from config.env import env_str
from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS, RUN_DIR

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp.apps.TestAppConfig"]

# "<kind>:<step>:<before|after>[,...]" ("*" matches any kind or step) SIGKILLs the worker
# process at that step boundary, once per workflow and step (marker files in STRATA_FAULT_DIR).
STRATA_FAULT_KILL_AT = env_str("STRATA_FAULT_KILL_AT", "")
# STRATA_FAULT_PAUSE_AT (same syntax): the first matching boundary of each workflow writes
# ``wf<pk>-paused`` and waits (at most 120 s) for ``wf<pk>-resume``; ``make chaos`` injects its
# fault (Redis, PostgreSQL or an agent down) in between, so it lands mid-run for every kind.
STRATA_FAULT_PAUSE_AT = env_str("STRATA_FAULT_PAUSE_AT", "")
STRATA_FAULT_DIR = Path(env_str("STRATA_FAULT_DIR", str(RUN_DIR / "faults")))

# The suite runs with a keyed chain (the workers it starts read the same default). Checkpoints
# are off unless a test turns them on (a directory, an object-store prefix of its own): the
# database is flushed between tests, so a checkpoint kept from an earlier test would read as a
# truncated log.
STRATA_AUDIT_KEYS = env_str("STRATA_AUDIT_KEY", "strata-test-suite-audit-key-0123456789abcdef")
STRATA_AUDIT_CHECKPOINT_DIR = env_str("STRATA_AUDIT_CHECKPOINT_DIR", "")
STRATA_AUDIT_CHECKPOINT_STORE = env_str("STRATA_AUDIT_CHECKPOINT_STORE", "off")
