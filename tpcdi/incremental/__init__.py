"""Incremental updates (TPC-DI clause 4.6) as a streamdi dataflow.

* :mod:`tpcdi.incremental.changes`: an incremental batch directory as one ordered event stream;
* :mod:`tpcdi.incremental.flow`: the dataflow whose state tables are the warehouse tables, its
  steps declared by :mod:`~tpcdi.incremental.dimension_steps` and
  :mod:`~tpcdi.incremental.fact_steps` on a :mod:`~tpcdi.incremental.builder` ``FlowBuilder``;
* :mod:`tpcdi.incremental.reference`: the static lookups its stateless steps use;
* :mod:`tpcdi.incremental.rules`: clause 4's column rules in Arrow compute.
"""

from migration.schema import declare_plain_sinks
from tpcdi.incremental.flow import FLOW_NAME, PLAIN_SINKS, build_flow

declare_plain_sinks(FLOW_NAME, PLAIN_SINKS)

__all__ = ["FLOW_NAME", "PLAIN_SINKS", "build_flow"]
