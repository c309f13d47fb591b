"""The benchmark applications of the TStream and MorphStream papers, as streamdi dataflows with
their workload knobs: Streaming Ledger, Grep&Sum, Toll Processing and Online Bidding.

Each app module has a knob dataclass, ``dataflow(knobs)``, ``initial_state(knobs)`` and
``batches(knobs)`` generating the same input for every executor (deterministic by seed, vectorized
so that 100,000-transaction batches generate in milliseconds).
 :data:`APPS` maps app names to them.
"""

from etl_dataflows.apps.common import App, AppKnobs
from etl_dataflows.apps.registry import APPS, app

__all__ = ["APPS", "App", "AppKnobs", "app"]
