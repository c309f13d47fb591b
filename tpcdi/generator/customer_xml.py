"""CustomerMgmt.xml from the customer history: every action's XML built as one column of text per
action type, then interleaved in time order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.generator import text
from tpcdi.generator.customers import Actions, CustomerBase
from tpcdi.generator.people import Persons

NL = "\r\n"
HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    + NL
    + '<TPCDI:Actions xmlns:TPCDI="http://www.tpc.org/tpc-di">'
    + NL
)
TAIL = "</TPCDI:Actions>" + NL


def _null(n: int) -> pa.Array:
    return pa.nulls(n, pa.string())


def _const(value: str, n: int) -> pa.Array:
    return pa.array([value] * n, pa.string()) if n else pa.array([], pa.string())


def element(name: str, values: pa.Array, indent: int, given: np.ndarray | None = None) -> pa.Array:
    """``<name>value</name>`` (``<name/>`` when null) per row; null where not ``given``."""
    tabs = "\t" * indent
    full = pc.binary_join_element_wise(
        f"{tabs}<{name}>", text.xml_escape(values), f"</{name}>{NL}", "", null_handling="emit_null"
    )
    out = pc.if_else(values.is_valid(), full, f"{tabs}<{name}/>{NL}")
    if given is not None:
        out = pc.if_else(pa.array(given), out, None)
    return out


def attribute(name: str, values: pa.Array) -> pa.Array:
    """`` name="value"`` per row, null where the value is null (the attribute is absent)."""
    return pc.binary_join_element_wise(
        f' {name}="', text.xml_escape(values), '"', "", null_handling="emit_null"
    )


def _group(
    name: str, parts: list[pa.Array], indent: int, present: np.ndarray | None = None
) -> list[pa.Array]:
    n = len(parts[0])
    tabs = "\t" * indent
    opening, closing = _const(f"{tabs}<{name}>{NL}", n), _const(f"{tabs}</{name}>{NL}", n)
    if present is not None:
        mask = pa.array(present)
        opening, closing = pc.if_else(mask, opening, None), pc.if_else(mask, closing, None)
    return [opening, *parts, closing]


def _phones(phones: list[list[pa.Array]], indent: int) -> list[pa.Array]:
    parts: list[pa.Array] = []
    for k, phone in enumerate(phones):
        inner = [
            element(tag, column, indent + 1)
            for tag, column in zip(
                ("C_CTRY_CODE", "C_AREA_CODE", "C_LOCAL", "C_EXT"), phone, strict=True
            )
        ]
        parts += _group(f"C_PHONE_{k + 1}", inner, indent)
    return parts


def _action_open(actions: Actions) -> pa.Array:
    stamp = pc.replace_substring(text.timestamps(actions.ts), " ", "T")
    return text.concat(f'\t<TPCDI:Action ActionType="{actions.kind}" ActionTS="', stamp, f'">{NL}')


def _customer_open(actions: Actions, attributes: list[pa.Array]) -> pa.Array:
    return text.concat(
        '\t\t<Customer C_ID="', text.ints(actions.customer), '"', *attributes, f">{NL}"
    )


def _close(n: int) -> list[pa.Array]:
    return [_const(f"\t\t</Customer>{NL}", n), _const(f"\t</TPCDI:Action>{NL}", n)]


def _account(actions: Actions, indent: int = 3) -> list[pa.Array]:
    """An ``Account`` element with the attributes and elements the action gives."""
    n = len(actions)
    values, given = actions.values, actions.given
    tax = values["tax"]
    if "tax" in given:
        tax = pc.if_else(pa.array(given["tax"]), tax, None)
    tabs = "\t" * indent
    opening = text.concat(
        f'{tabs}<Account CA_ID="',
        text.ints(actions.account),
        '"',
        attribute("CA_TAX_ST", tax),
        f">{NL}",
    )
    return [
        opening,
        element("CA_B_ID", values["broker"], indent + 1, given.get("broker")),
        element("CA_NAME", values["name"], indent + 1, given.get("name")),
        _const(f"{tabs}</Account>{NL}", n),
    ]


def _new(actions: Actions) -> pa.Array:
    people: Persons = actions.people  # type: ignore[assignment]
    tier = actions.tier
    assert people is not None and tier is not None
    n = len(actions)
    tier_text = text.with_nulls(text.ints(tier), tier == 0)
    attrs = [
        attribute("C_TAX_ID", people.tax_id),
        attribute("C_GNDR", people.gender),
        attribute("C_TIER", tier_text),
        attribute("C_DOB", text.dates(people.dob)),
    ]
    parts = [
        _action_open(actions),
        _customer_open(actions, attrs),
        *_group(
            "Name",
            [
                element("C_L_NAME", people.last, 4),
                element("C_F_NAME", people.first, 4),
                element("C_M_NAME", people.middle, 4),
            ],
            3,
        ),
        *_group("Address", [element(tag, getattr(people, name), 4) for tag, name in _ADDRESS], 3),
        *_group(
            "ContactInfo",
            [
                element("C_PRIM_EMAIL", people.email1, 4),
                element("C_ALT_EMAIL", people.email2, 4),
                *_phones(people.phones, 4),
            ],
            3,
        ),
        *_group(
            "TaxInfo",
            [
                element("C_LCL_TX_ID", people.local_tax, 4),
                element("C_NAT_TX_ID", people.national_tax, 4),
            ],
            3,
        ),
        *_account(actions),
        *_close(n),
    ]
    return text.concat(*parts)


_ADDRESS = (
    ("C_ADLINE1", "addr1"),
    ("C_ADLINE2", "addr2"),
    ("C_ZIPCODE", "zipcode"),
    ("C_CITY", "city"),
    ("C_STATE_PROV", "state"),
    ("C_CTRY", "country"),
)


def _updcust(actions: Actions) -> pa.Array:
    values, given = actions.values, actions.given
    n = len(actions)
    tier = pc.if_else(pa.array(given["tier"]), values["tier"], None)
    address_given = np.zeros(n, dtype=bool)
    for _, name in _ADDRESS:
        address_given |= given[name]
    phones = [
        [values[f"phone{k}_{p}"] for p in ("ctry", "area", "local", "ext")] for k in (1, 2, 3)
    ]
    parts = [
        _action_open(actions),
        _customer_open(actions, [attribute("C_TIER", tier)]),
        *_group(
            "Address",
            [element(tag, values[name], 4, given[name]) for tag, name in _ADDRESS],
            3,
            address_given,
        ),
        *_group(
            "ContactInfo",
            [
                element("C_PRIM_EMAIL", values["email1"], 4, given["email1"]),
                element("C_ALT_EMAIL", values["email2"], 4, given["email2"]),
                *_phones(phones, 4),
            ],
            3,
        ),
        *_close(n),
    ]
    return text.concat(*parts)


def _account_only(actions: Actions) -> pa.Array:
    n = len(actions)
    if actions.kind == "CLOSEACCT":
        account = [text.concat('\t\t\t<Account CA_ID="', text.ints(actions.account), f'"/>{NL}')]
    else:
        account = _account(actions)
    return text.concat(_action_open(actions), _customer_open(actions, []), *account, *_close(n))


def _inact(actions: Actions) -> pa.Array:
    return text.concat(_action_open(actions), _customer_open(actions, []), *_close(len(actions)))


def actions_xml(base: CustomerBase) -> pa.Array:
    """The text of every action, in time order (one element per action)."""
    builders = {"NEW": _new, "UPDCUST": _updcust, "INACT": _inact}
    texts, stamps = [], []
    for actions in base.actions:
        if len(actions) == 0:
            continue
        texts.append(builders.get(actions.kind, _account_only)(actions))
        stamps.append(actions.ts)
    order = np.argsort(np.concatenate(stamps), kind="stable")
    return pa.concat_arrays(texts).take(pa.array(order))
