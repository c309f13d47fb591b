"""The one exception hierarchy of streamdi.

Every error streamdi raises derives from :class:`StreamdiError` and carries one of two kinds:

* :class:`TransientError` — the operation may succeed if retried (a broker that is not up yet, a
  database connection that dropped). Retry loops catch ``TransientError`` and nothing else.
* :class:`TerminalError` — retrying cannot help (bad configuration, a malformed dataflow, a bug);
  the caller stops and reports.

Each stage defines its own subclasses in its ``exceptions.py`` (``DataflowError``, ``IngestError``…)
and mixes in the kind: ``class BrokerUnavailable(IngestError, TransientError)``. Driver errors are
mapped to these at the boundary with ``raise ... from exc``; context travels as attributes.

Bad *records* are not exceptions: they are data and go to the dead-letter table with a reason.
"""

from __future__ import annotations


class StreamdiError(Exception):
    """Root of every error raised by streamdi."""


class TransientError(Exception):
    """Mixin: the failed operation may succeed when retried."""


class TerminalError(Exception):
    """Mixin: retrying cannot help; stop and report."""


class ConfigurationError(StreamdiError, TerminalError):
    """A setting is missing or has a value streamdi cannot use.

    ``problems`` lists ``(setting name, what is expected)`` pairs, named as the environment spells
    them (``KAFKA__BOOTSTRAP_SERVERS``), so the message says exactly what to fix.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = [f"  {name}: {expected}" for name, expected in problems]
        super().__init__("invalid configuration:\n" + "\n".join(lines))
