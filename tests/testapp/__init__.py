"""Test-only machinery, installed by ``tests.settings`` and never in production: the
framework's self-test kind ``noop_check`` and the SIGKILL fault injector at step boundaries."""
