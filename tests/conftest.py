"""Shared test configuration: a deterministic hypothesis profile for CI, and a temporary
directory of this run's own.

Embedded PostgreSQL runs as an unprivileged system user when the tests run as root, so its data
directories under the test's temporary directory must stay reachable for that user. pytest's
shared ``/tmp/pytest-of-<user>`` is reset to mode 0700 by every pytest session that starts, which
takes a running server's data directory away from it when two test runs overlap; a run-owned base
directory (removed when the run ends) avoids that. ``--basetemp`` given on the command line wins.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_OWN_BASETEMP = "_streamdi_own_basetemp"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None:
        own = tempfile.mkdtemp(prefix="streamdi-tests-")
        config.option.basetemp = own
        setattr(config, _OWN_BASETEMP, own)


def pytest_unconfigure(config: pytest.Config) -> None:
    own = getattr(config, _OWN_BASETEMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)
