"""CustomerMgmt.xml (clause 2.2.2.5) into one typed Arrow table.

One row per account of each action (NEW, ADDACCT, UPDACCT and CLOSEACCT carry one or more
``Account`` elements); an action without accounts (UPDCUST, INACT) is one row with null account
columns. Rows keep the document's order; ``action_seq`` numbers the actions from 0.

Columns use Customer.txt's names for the same data (``C_EMAIL_1`` is ``C_PRIM_EMAIL``,
``C_EMAIL_2`` is ``C_ALT_EMAIL``, ``C_CTRY_n``/``C_AREA_n``/``C_LOCAL_n``/``C_EXT_n`` are the parts
of ``C_PHONE_n``), plus ``CA_ID``, ``CA_TAX_ST``, ``CA_B_ID`` and ``CA_NAME`` of the account.

Partial updates: an update names only what it changes, and an empty element (``<C_ADLINE2/>``)
sets a value to NULL. Values are null both when absent and when empty; the ``given`` column tells
them apart. Its bit ``k`` is set when field :data:`GIVEN_FIELDS` ``[k]`` appears in the action (an
element present as ``<C_PHONE_n>`` gives all four parts of that phone). Use :func:`given`.

Rejected (with the line of the ``<Action>`` and the action's XML text): an unknown action type, a
bad ``ActionTS``, a missing or non-numeric ``C_ID``/``CA_ID``, a value that does not parse as its
type, an unknown element or attribute, an account action without an account, a NEW action without
the fields the specification requires on NEW. Malformed XML stops the parse at the error, which
is rejected with its line; the actions before it are returned.
"""

from __future__ import annotations

import datetime
import re
import xml.parsers.expat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.readers.registry import CUSTOMER_FIELDS, I64, STR, TS, Field
from tpcdi.readers.rejects import ReadResult, rejects_table

ACTION_TYPES = ("NEW", "ADDACCT", "UPDACCT", "UPDCUST", "CLOSEACCT", "INACT")

_CUSTOMER = [
    Field(f.name, f.type, f.name == "C_ID") for f in CUSTOMER_FIELDS if f.name != "C_ST_ID"
]
_ACCOUNT = [
    Field("CA_ID", I64),
    Field("CA_TAX_ST", I64),
    Field("CA_B_ID", I64),
    Field("CA_NAME", STR),
]
#: Fields whose presence the ``given`` bitmask records, in bit order.
GIVEN_FIELDS: tuple[str, ...] = tuple(
    f.name for f in _CUSTOMER + _ACCOUNT if f.name not in ("C_ID", "CA_ID")
)
_BIT = {name: 1 << k for k, name in enumerate(GIVEN_FIELDS)}
_CUSTOMER_ATTRS = {"C_ID", "C_TAX_ID", "C_GNDR", "C_TIER", "C_DOB"}
_ACCOUNT_ATTRS = {"CA_ID", "CA_TAX_ST"}
_LEAVES = {
    "C_L_NAME",
    "C_F_NAME",
    "C_M_NAME",
    "C_ADLINE1",
    "C_ADLINE2",
    "C_ZIPCODE",
    "C_CITY",
    "C_STATE_PROV",
    "C_CTRY",
    "C_LCL_TX_ID",
    "C_NAT_TX_ID",
}
_RENAMED = {"C_PRIM_EMAIL": "C_EMAIL_1", "C_ALT_EMAIL": "C_EMAIL_2"}
_PHONE_PARTS = {"C_CTRY_CODE": "CTRY", "C_AREA_CODE": "AREA", "C_LOCAL": "LOCAL", "C_EXT": "EXT"}
_REQUIRED_ON_NEW = (
    "C_TAX_ID",
    "C_DOB",
    "C_L_NAME",
    "C_F_NAME",
    "C_ADLINE1",
    "C_ZIPCODE",
    "C_CITY",
    "C_STATE_PROV",
)
_ACCOUNT_ACTIONS = {"NEW", "ADDACCT", "UPDACCT", "CLOSEACCT"}
_PHONES = {"C_PHONE_1", "C_PHONE_2", "C_PHONE_3"}
_CONTAINERS = {"Name", "Address", "ContactInfo", "TaxInfo", "Customer", "Account"} | _PHONES
_READ_BYTES = 1 << 20

COLUMNS: tuple[Field, ...] = (
    Field("action_seq", I64, True),
    Field("ActionType", STR, True),
    Field("ActionTS", TS, True),
    *_CUSTOMER,
    *_ACCOUNT,
    Field("given", I64, True),
)


def schema() -> pa.Schema:
    """The schema of the table :func:`read_customer_mgmt` returns (without ``_line``)."""
    return pa.schema([pa.field(f.name, f.type, nullable=not f.required) for f in COLUMNS])


def given(table: pa.Table, field: str) -> pa.Array:
    """Boolean array: whether ``field`` appears in each row's action (see the module doc)."""
    mask = pc.bit_wise_and(table.column("given"), pa.scalar(_BIT[field], pa.int64()))
    return pc.not_equal(mask, 0)


def _local(name: str) -> str:
    return name.rsplit(":", 1)[-1]


_INT = re.compile(r"\d{1,18}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def _check_int(name: str, value: str | None, errors: list[str]) -> None:
    if value and not _INT.fullmatch(value):
        errors.append(f"{name}: cannot read {value!r} as int64")


def _check_date(name: str, value: str | None, errors: list[str]) -> None:
    if not value:
        return
    try:
        if not _DATE.fullmatch(value):
            raise ValueError(value)
        datetime.date.fromisoformat(value)
    except ValueError:
        errors.append(f"{name}: cannot read {value!r} as date32")


class _ActionCollector:
    """Expat handlers that check each action and collect its values as text per column.

    ``buffer`` holds the document's bytes from ``buffer_start`` on and always contains the
    current action, so a rejected action's XML text can be cut out when it ends.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.columns: dict[str, list[Any]] = {f.name: [] for f in COLUMNS}
        self.lines: list[int] = []
        self.rejects: tuple[list[int], list[str], list[str | None]] = ([], [], [])
        self.buffer = bytearray()
        self.buffer_start = 0
        self.parser = xml.parsers.expat.ParserCreate()
        self.parser.buffer_text = True
        self.parser.StartElementHandler = self._start
        self.parser.EndElementHandler = self._end
        self.parser.CharacterDataHandler = self._text
        self.stack: list[str] = []
        self.action: dict[str, Any] | None = None
        self.text: list[str] = []
        self.seq = 0

    def feed(self, block: bytes) -> None:
        """Parse the next block of the document (an empty block ends it)."""
        keep_from = self.action["start"] if self.action else self.buffer_start + len(self.buffer)
        del self.buffer[: keep_from - self.buffer_start]
        self.buffer_start = keep_from
        self.buffer += block
        self.parser.Parse(block, not block)

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        local = _local(name)
        depth = len(self.stack)
        self.stack.append(local)
        self.text = []
        if local == "Action" and depth == 1:
            self.action = {
                "type": attrs.get("ActionType"),
                "ts": attrs.get("ActionTS"),
                "line": self.parser.CurrentLineNumber,
                "start": self.parser.CurrentByteIndex,
                "customer": {},
                "given": 0,
                "accounts": [],
                "customers": 0,
                "errors": [
                    f"unknown attribute {k}" for k in attrs if k not in ("ActionType", "ActionTS")
                ],
            }
            return
        action = self.action
        if action is None:
            return
        parent = self.stack[-2]
        if local == "Customer" and parent == "Action":
            action["customers"] += 1
            self._attributes(action["customer"], action, attrs, _CUSTOMER_ATTRS)
        elif local == "Account" and parent == "Customer":
            account: dict[str, Any] = {"given": 0}
            self._attributes(account, account, attrs, _ACCOUNT_ATTRS)
            action["accounts"].append(account)
        elif local in _PHONES and parent == "ContactInfo":
            for part in _PHONE_PARTS.values():
                action["given"] |= _BIT[f"C_{part}_{local[-1]}"]
        elif attrs:
            action["errors"].append(f"unknown attribute on {local}")

    def _attributes(
        self, target: dict[str, Any], owner: dict[str, Any], attrs: dict[str, str], known: set[str]
    ) -> None:
        assert self.action is not None
        for key, value in attrs.items():
            if key not in known:
                self.action["errors"].append(f"unknown attribute {key}")
                continue
            target[key] = value
            owner["given"] |= _BIT.get(key, 0)

    def _text(self, data: str) -> None:
        self.text.append(data)

    def _end(self, name: str) -> None:
        local = self.stack.pop()
        action = self.action
        if action is None:
            return
        if local == "Action" and len(self.stack) == 1:
            self._finish(action, self.parser.CurrentByteIndex + len(name) + 3)
            self.action = None
            return
        parent = self.stack[-1]
        value = "".join(self.text)
        self.text = []
        if local in _LEAVES or local in _RENAMED:
            column = _RENAMED.get(local, local)
            action["customer"][column] = value
            action["given"] |= _BIT[column]
        elif local in _PHONE_PARTS and parent in _PHONES:
            action["customer"][f"C_{_PHONE_PARTS[local]}_{parent[-1]}"] = value
        elif local in ("CA_B_ID", "CA_NAME") and parent == "Account" and action["accounts"]:
            account = action["accounts"][-1]
            account[local] = value
            account["given"] |= _BIT[local]
        elif local not in _CONTAINERS:
            action["errors"].append(f"unknown element {local}")

    def _check(self, action: dict[str, Any]) -> list[str]:
        errors: list[str] = action["errors"]
        kind, customer, accounts = action["type"], action["customer"], action["accounts"]
        if kind not in ACTION_TYPES:
            errors.append(f"unknown ActionType {kind!r}")
        ts = action["ts"] or ""
        try:
            if not _TIMESTAMP.fullmatch(ts):
                raise ValueError(ts)
            datetime.datetime.fromisoformat(ts)
        except ValueError:
            errors.append(f"ActionTS: cannot read {action['ts']!r} as a timestamp")
        if action["customers"] != 1:
            errors.append(f"{action['customers']} Customer elements (expected 1)")
        if not customer.get("C_ID"):
            errors.append("missing C_ID")
        _check_int("C_ID", customer.get("C_ID"), errors)
        _check_int("C_TIER", customer.get("C_TIER"), errors)
        _check_date("C_DOB", customer.get("C_DOB"), errors)
        if kind in _ACCOUNT_ACTIONS and not accounts:
            errors.append(f"{kind} without an Account")
        for account in accounts:
            if not account.get("CA_ID"):
                errors.append("Account without CA_ID")
            for key in ("CA_ID", "CA_TAX_ST", "CA_B_ID"):
                _check_int(key, account.get(key), errors)
        if kind == "NEW":
            absent = [f for f in _REQUIRED_ON_NEW if not customer.get(f)]
            absent += [f for a in accounts for f in ("CA_B_ID", "CA_TAX_ST") if not a.get(f)]
            if absent:
                errors.append("NEW without " + ", ".join(sorted(set(absent))))
        return errors

    def _finish(self, action: dict[str, Any], end: int) -> None:
        errors = self._check(action)
        if errors:
            lines, reasons, texts = self.rejects
            lines.append(action["line"])
            reasons.append("; ".join(errors))
            raw = self.buffer[action["start"] - self.buffer_start : end - self.buffer_start]
            texts.append(bytes(raw).decode("utf-8", "replace"))
            self.seq += 1
            return
        cols, customer = self.columns, action["customer"]
        for account in action["accounts"] or [{"given": 0}]:
            cols["action_seq"].append(self.seq)
            cols["ActionType"].append(action["type"])
            cols["ActionTS"].append(action["ts"])
            for f in _CUSTOMER:
                cols[f.name].append(customer.get(f.name))
            for f in _ACCOUNT:
                cols[f.name].append(account.get(f.name))
            cols["given"].append(action["given"] | account["given"])
            self.lines.append(action["line"])
        self.seq += 1

    def table(self) -> pa.Table:
        """The checked actions as a typed table (every value is known to convert)."""
        arrays = []
        for spec in COLUMNS:
            if spec.name in ("action_seq", "given"):
                arrays.append(pa.array(self.columns[spec.name], I64))
                continue
            text = pa.array(self.columns[spec.name], STR)
            arrays.append(pc.if_else(pc.equal(text, ""), None, text).cast(spec.type))
        return pa.Table.from_arrays(arrays, schema=schema())


def read_customer_mgmt(path: Path, *, line_numbers: bool = False) -> ReadResult:
    """Read CustomerMgmt.xml; see the module documentation for the table and the rejects."""
    collector = _ActionCollector(path.name)
    lines, reasons, texts = collector.rejects
    with open(path, "rb") as handle:
        while True:
            block = handle.read(_READ_BYTES)
            try:
                collector.feed(block)
            except xml.parsers.expat.ExpatError as exc:
                lines.append(int(exc.lineno))
                reasons.append(f"XML syntax error: {xml.parsers.expat.errors.messages[exc.code]}")
                texts.append(None)
                break
            if not block:
                break
    table = collector.table()
    if line_numbers:
        table = table.append_column("_line", pa.array(collector.lines, pa.int64()))
    return ReadResult(table, rejects_table(path.name, lines, reasons, texts))
