"""``python -m benchmarks.fuzz_api``: schemathesis against a real ``streamdi serve``, counted.

The run starts ``streamdi serve`` (its own broker, embedded PostgreSQL and a DuckDB warehouse,
the kv dataflow of ``tests.api_flows`` fed over HTTP, ``API__TOKEN`` set), seeds it with rows in
both warehouses and a dead letter, and sends requests drawn from its OpenAPI description in five
phases:

1. ``auth``: every operation without a token, with a wrong one, another scheme, an empty one and
   two ``Authorization`` headers: 401, 401, 401, 401 and 400 ``ambiguous_credentials``;
2. ``methods``: every path with every method it does not declare: 405 with ``Allow``;
3. ``positive`` and 4. ``negative``: schemathesis' cases per operation, valid and invalid ones;
5. ``stateful``: schemathesis' state machine, following the OpenAPI links between operations
   (an answer to its pages, a table to a query, a dead letter to its replay...).

Every response is checked: no 5xx, its status declared for its operation, its content type and
body those the description gives. Every request goes over one keep-alive connection, and a
request that finds it closed without a ``Connection: close`` answer before it counts as a
connection reset. The serve log must not hold an internal error. The report (JSON and Markdown)
gives the requests per operation and status, the failures with a curl command to reproduce each,
the time and the load average.

Full run (about 20,000 requests; 10-20 minutes on two cores)::

    .venv/bin/python -m benchmarks.fuzz_api --requests 20000 --out reports/fuzz-api

``tests/integration/security/test_http_fuzz.py`` runs :func:`fuzz` with a small budget in the
default test run. schemathesis is a development dependency (``make install-dev``).
"""

from benchmarks.fuzz_api.known import KNOWN_CRASHES, known_crash
from benchmarks.fuzz_api.phases import fuzz
from benchmarks.fuzz_api.report import FuzzReport, markdown, write_report
from benchmarks.fuzz_api.target import TOKEN, FuzzTarget, fuzz_target

__all__ = [
    "KNOWN_CRASHES",
    "TOKEN",
    "FuzzReport",
    "FuzzTarget",
    "fuzz",
    "fuzz_target",
    "known_crash",
    "markdown",
    "write_report",
]
