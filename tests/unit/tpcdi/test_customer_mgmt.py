"""CustomerMgmt.xml: the six action types, partial updates, nested elements, rejects."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow.compute as pc

from tpcdi.readers import GIVEN_FIELDS, given, read_file

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\r\n<TPCDI:Actions xmlns:TPCDI="http://www.tpc.org/tpc-di">\r\n'
TAIL = "</TPCDI:Actions>\r\n"

NEW = """\t<TPCDI:Action ActionType="NEW" ActionTS="2007-07-07T16:07:49">
\t\t<Customer C_ID="0" C_TAX_ID="923-54-6498" C_GNDR="F" C_TIER="3" C_DOB="1940-12-02">
\t\t\t<Name><C_L_NAME>Joannis</C_L_NAME><C_F_NAME>Adara</C_F_NAME><C_M_NAME/></Name>
\t\t\t<Address><C_ADLINE1>4779 Weller Way</C_ADLINE1><C_ADLINE2/><C_ZIPCODE>92624</C_ZIPCODE>
\t\t\t<C_CITY>Columbus</C_CITY><C_STATE_PROV>Ontario</C_STATE_PROV><C_CTRY>Canada</C_CTRY></Address>
\t\t\t<ContactInfo><C_PRIM_EMAIL>a.j@example.com</C_PRIM_EMAIL><C_ALT_EMAIL/>
\t\t\t\t<C_PHONE_1><C_CTRY_CODE>1</C_CTRY_CODE><C_AREA_CODE>872</C_AREA_CODE><C_LOCAL>523-8928</C_LOCAL><C_EXT/></C_PHONE_1>
\t\t\t\t<C_PHONE_2><C_CTRY_CODE/><C_AREA_CODE/><C_LOCAL>492-3961</C_LOCAL><C_EXT/></C_PHONE_2>
\t\t\t\t<C_PHONE_3><C_CTRY_CODE/><C_AREA_CODE/><C_LOCAL/><C_EXT/></C_PHONE_3>
\t\t\t</ContactInfo>
\t\t\t<TaxInfo><C_LCL_TX_ID>CA3</C_LCL_TX_ID><C_NAT_TX_ID>YT3</C_NAT_TX_ID></TaxInfo>
\t\t\t<Account CA_ID="0" CA_TAX_ST="1"><CA_B_ID>10180</CA_B_ID><CA_NAME>Main &amp; Co</CA_NAME></Account>
\t\t\t<Account CA_ID="1" CA_TAX_ST="2"><CA_B_ID>10181</CA_B_ID><CA_NAME/></Account>
\t\t</Customer>
\t</TPCDI:Action>
"""
OTHERS = """\t<TPCDI:Action ActionType="ADDACCT" ActionTS="2007-07-08T10:00:00">
\t\t<Customer C_ID="0"><Account CA_ID="2" CA_TAX_ST="0"><CA_B_ID>5</CA_B_ID><CA_NAME>x</CA_NAME></Account></Customer>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="UPDACCT" ActionTS="2007-07-09T10:00:00">
\t\t<Customer C_ID="0"><Account CA_ID="2"><CA_NAME/></Account></Customer>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="UPDCUST" ActionTS="2007-07-10T10:00:00">
\t\t<Customer C_ID="0" C_TIER="">
\t\t\t<Address><C_ADLINE2/><C_CITY>Augusta</C_CITY></Address>
\t\t\t<ContactInfo><C_PHONE_1><C_AREA_CODE>357</C_AREA_CODE><C_LOCAL>423-9191</C_LOCAL></C_PHONE_1></ContactInfo>
\t\t</Customer>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="CLOSEACCT" ActionTS="2007-07-11T10:00:00">
\t\t<Customer C_ID="0"><Account CA_ID="1" /></Customer>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="INACT" ActionTS="2007-07-12T10:00:00">
\t\t<Customer C_ID="0">
\t\t</Customer>
\t</TPCDI:Action>
"""


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "CustomerMgmt.xml"
    path.write_bytes((HEAD + body.replace("\n", "\r\n") + TAIL).encode())
    return path


def test_all_six_action_types_with_nested_elements(tmp_path: Path) -> None:
    result = read_file(write(tmp_path, NEW + OTHERS), line_numbers=True)
    assert result.rejects.num_rows == 0
    table = result.table
    assert table.column("ActionType").to_pylist() == [
        "NEW",
        "NEW",
        "ADDACCT",
        "UPDACCT",
        "UPDCUST",
        "CLOSEACCT",
        "INACT",
    ]
    assert table.column("action_seq").to_pylist() == [0, 0, 1, 2, 3, 4, 5]
    new = table.to_pylist()[0]
    assert new["ActionTS"] == datetime.datetime(2007, 7, 7, 16, 7, 49)
    assert new["C_DOB"] == datetime.date(1940, 12, 2) and new["C_TIER"] == 3
    assert (new["C_CTRY_1"], new["C_AREA_1"], new["C_LOCAL_1"], new["C_EXT_1"]) == (
        "1",
        "872",
        "523-8928",
        None,
    )
    assert new["C_LOCAL_2"] == "492-3961" and new["C_EMAIL_1"] == "a.j@example.com"
    assert (new["CA_ID"], new["CA_TAX_ST"], new["CA_B_ID"], new["CA_NAME"]) == (
        0,
        1,
        10180,
        "Main & Co",
    )
    second_account = table.to_pylist()[1]
    assert second_account["CA_ID"] == 1 and second_account["CA_NAME"] is None
    assert second_account["C_L_NAME"] == "Joannis"  # customer fields repeat per account
    assert table.column("_line").to_pylist()[:3] == [3, 3, 18]
    closing = table.to_pylist()[5]
    assert closing["CA_ID"] == 1 and closing["given"] == 0


def test_partial_updates_tell_absent_from_empty(tmp_path: Path) -> None:
    table = read_file(write(tmp_path, NEW + OTHERS)).table
    update = table.filter(pc.equal(table["ActionType"], "UPDCUST"))
    row = update.to_pylist()[0]
    assert row["C_CITY"] == "Augusta" and row["C_ADLINE2"] is None and row["C_TIER"] is None
    marks = {name: given(update, name)[0].as_py() for name in GIVEN_FIELDS}
    assert marks["C_CITY"] and marks["C_ADLINE2"] and marks["C_TIER"]  # given: set (maybe to NULL)
    assert not marks["C_ADLINE1"] and not marks["C_ZIPCODE"] and not marks["C_EMAIL_1"]
    assert marks["C_CTRY_1"] and marks["C_EXT_1"] and not marks["C_LOCAL_2"]  # whole phone 1
    account_update = table.filter(pc.equal(table["ActionType"], "UPDACCT"))
    assert (
        given(account_update, "CA_NAME")[0].as_py()
        and not given(account_update, "CA_B_ID")[0].as_py()
    )
    new = table.slice(0, 1)
    assert all(given(new, name)[0].as_py() for name in GIVEN_FIELDS)


def test_bad_actions_are_rejected_with_their_xml_and_the_rest_is_kept(tmp_path: Path) -> None:
    bad = """\t<TPCDI:Action ActionType="MOVE" ActionTS="2007-07-08T10:00:00">
\t\t<Customer C_ID="0"/>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="INACT" ActionTS="2007-07-08T10:00:00">
\t\t<Customer C_ID="zero"/>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="ADDACCT" ActionTS="2007-07-08">
\t\t<Customer C_ID="0"/>
\t</TPCDI:Action>
\t<TPCDI:Action ActionType="UPDCUST" ActionTS="2007-07-09T10:00:00">
\t\t<Customer C_ID="0" C_DOB="1940-02-30"><Shoe>x</Shoe></Customer>
\t</TPCDI:Action>
"""
    result = read_file(write(tmp_path, NEW + bad + OTHERS))
    assert result.table.column("action_seq").to_pylist() == [0, 0, 5, 6, 7, 8, 9]
    rejects = result.rejects.to_pylist()
    assert [r["line"] for r in rejects] == [18, 21, 24, 27]
    assert "unknown ActionType 'MOVE'" in rejects[0]["reason"]
    assert "C_ID: cannot read 'zero'" in rejects[1]["reason"]
    assert (
        "ActionTS" in rejects[2]["reason"] and "ADDACCT without an Account" in rejects[2]["reason"]
    )
    assert "unknown element Shoe" in rejects[3]["reason"] and "C_DOB" in rejects[3]["reason"]
    assert rejects[0]["text"].startswith('<TPCDI:Action ActionType="MOVE"')
    assert rejects[0]["text"].endswith("</TPCDI:Action>")


def test_malformed_xml_keeps_the_actions_before_the_error(tmp_path: Path) -> None:
    broken = '\t<TPCDI:Action ActionType="INACT" ActionTS="2007-07-08T10:00:00">\n\t\t<Customer C_ID="0">\n'
    result = read_file(write(tmp_path, NEW + broken))
    assert result.table.column("ActionType").to_pylist() == ["NEW", "NEW"]
    reject = result.rejects.to_pylist()[0]
    assert reject["reason"].startswith("XML syntax error") and reject["line"] >= 18
