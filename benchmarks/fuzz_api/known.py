"""Requests known to stop the service under test, held back by the fuzz run until fixed.

None is known today. When a run finds one (the service stops: the run ends and lists the last
requests sent), pin it with a strict xfail test in
``tests/integration/security/test_http_attacks.py``, register it here with a predicate that
recognises such a request, and remove both once it is fixed: the run then keeps fuzzing the rest
of the API instead of ending at the first crash, and counts what it held back.

Two were found and fixed this way: an event value that is a list or an object (the collector
failed on it) and a replayed event that does not parse (the consumer failed on it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A predicate over a schemathesis case and the known stream names.
CrashPredicate = Callable[[Any, set[str]], bool]

#: key -> (what the request does to the service, whether a case is such a request)
KNOWN_CRASHES: dict[str, tuple[str, CrashPredicate]] = {}


def known_crash(case: Any, streams: set[str]) -> str | None:
    """The :data:`KNOWN_CRASHES` key ``case`` would trigger, or None."""
    for key, (_, matches) in KNOWN_CRASHES.items():
        if matches(case, streams):
            return key
    return None
