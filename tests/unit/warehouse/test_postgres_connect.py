"""A DSN that does not parse is bad configuration, not an unreachable server."""

from __future__ import annotations

import pytest

from streamdi.errors import ConfigurationError
from warehouse.exceptions import WarehouseUnavailable
from warehouse.postgres_reads import connect


def test_a_dsn_that_does_not_parse_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as refused:
        connect("host", {})
    assert "POSTGRES__DSN" in str(refused.value) and "connection string" in str(refused.value)


def test_a_server_that_does_not_answer_is_unavailable() -> None:
    with pytest.raises(WarehouseUnavailable):
        connect("host=127.0.0.1 port=1 connect_timeout=2", {})
