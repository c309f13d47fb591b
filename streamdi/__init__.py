"""streamdi: streaming ETL into a warehouse/polystore.

This package is the small base every other package may import, and that imports none of them:
the settings tree (with its check for unknown variables), the root of the exception hierarchy and
its Transient/Terminal mixins, logging, the process exit codes, the watchdog and the containers'
healthcheck probe. The stages are the top-level packages ``etl_dataflows``, ``staging``,
``ingest``, ``migration`` and ``api``; ``runtime`` wires them into a run, ``tpcdi`` is the
workload, and ``cli`` is the ``streamdi`` command on top (the layers are written, and checked, in
``pyproject.toml``'s ``[tool.importlinter]``).
"""

__version__ = "0.2.0"
