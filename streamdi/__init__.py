"""streamdi: streaming ETL into a warehouse/polystore.

This package is the service shell shared by every stage: the settings tree, the root of the
exception hierarchy, logging, and the ``streamdi`` command line. The stages themselves are the
top-level packages ``ingest``, ``etl_dataflows``, ``staging``, ``migration``, ``api`` and ``tpcdi``.
"""

__version__ = "0.1.0"
