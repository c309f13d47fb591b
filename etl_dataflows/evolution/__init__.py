"""Changing a dataflow over live state: its stored shape, the plan of an upgrade, and the row
conversion every store applies (see ``docs/evolution.md``)."""

from etl_dataflows.evolution.convert import ConversionError, RowConversion
from etl_dataflows.evolution.plan import Change, UpgradePlan, plan_upgrade
from etl_dataflows.evolution.shape import DataflowShape, TableShape, describe_flow

__all__ = [
    "Change",
    "ConversionError",
    "DataflowShape",
    "RowConversion",
    "TableShape",
    "UpgradePlan",
    "describe_flow",
    "plan_upgrade",
]
