"""The two versions of the upgrade tests' bank dataflow, as ``module:attribute`` specs."""

from etl_dataflows import Dataflow, col
from tests.unit.staging.test_upgrade import bank

v1 = bank(1)
v2 = bank(2)


def _rekeyed() -> Dataflow:
    """Version 1 with the accounts keyed by a string: the stored rows cannot be re-keyed."""
    flow = Dataflow("bank")
    accounts = flow.table("accounts", key={"id": "string"}, columns={"balance": "int64"})
    flow.source("transfers", schema={"src": "int64", "dst": "int64", "amount": "int64"})
    flow.transact("transfer").update(
        accounts, col("src").cast("string"), set={"balance": col("amount")}, if_missing="insert"
    )
    flow.sink("moved")
    return flow


rekeyed = _rekeyed()
