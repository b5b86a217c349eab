"""Parsing bounces: the RFCs' own examples, real Postfix DSNs, plain-text bounces, and anything at all."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.producers.bounces.corpus import load, names
from worker.producers.bounces.parse import Report, Unparseable, parse_report

# CI runs the same examples every time; local runs explore.
CI = bool(os.environ.get("CI"))


def _report(name: str) -> Report:
    parsed = parse_report(load(name))
    assert isinstance(parsed, Report), parsed
    return parsed


def test_rfc3464_multi_recipient_example_gives_each_recipient_its_kind() -> None:
    report = _report("rfc3464-multi-recipient.eml")
    assert report.source == "dsn"
    assert [(r.recipient, r.kind, r.status, r.action) for r in report.recipients] == [
        ("arathib@vnet.ibm.com", "hard", "5.0.0", "failed"),
        ("johnh@hpnjld.njd.hp.com", "soft", "4.0.0", "delayed"),
        ("wsnell@sdcc13.ucsd.edu", "hard", "5.0.0", "failed"),
    ]
    assert (
        report.recipients[0].diagnostic == "smtp; 550 'arathib@vnet.IBM.COM' is not a registered gateway user"
    )
    assert report.recipients[0].smtp_code == 550


def test_rfc3464_simple_example_failed_after_a_timeout_is_soft_for_the_address() -> None:
    (recipient,) = _report("rfc3464-simple.eml").recipients
    assert (recipient.kind, recipient.action, recipient.status) == ("soft", "failed", "4.0.0")


def test_a_real_postfix_dsn_names_the_return_path_and_the_original_message_id() -> None:
    report = _report("postfix-unknown-user.eml")
    assert [(r.recipient, r.kind, r.status) for r in report.recipients] == [
        ("no-such-user@mta.example.net", "hard", "5.1.1")
    ]
    assert report.addressed_to[0].startswith("bounces+1-")
    assert report.original_message_ids == ("<1.5f3c2a1b0c9d8@example.org>",)
    assert report.message_id is not None and report.message_id.endswith("@mta.example.net>")


def test_a_real_postfix_delay_notice_is_soft() -> None:
    (recipient,) = _report("postfix-delayed.eml").recipients
    assert (recipient.kind, recipient.action, recipient.status) == ("soft", "delayed", "4.4.1")


@pytest.mark.parametrize("name", ["rfc5965-simple.eml", "rfc5965-optional-fields.eml"])
def test_rfc5965_examples_are_abuse_complaints(name: str) -> None:
    report = _report(name)
    assert report.source == "arf" and report.feedback_type == "abuse"
    assert {r.kind for r in report.recipients} == {"complaint"}
    assert report.original_message_ids == ("<8787KJKJ3K4J3K4J3K4J3.mail@example.net>",)


def test_an_arf_report_names_its_original_recipient() -> None:
    (recipient,) = _report("rfc5965-optional-fields.eml").recipients
    assert recipient.recipient == "user@example.com"


@pytest.mark.parametrize("feedback_type", ["not-spam", "auth-failure"])
def test_feedback_that_is_not_a_complaint_suppresses_nobody(feedback_type: str) -> None:
    raw = load("rfc5965-optional-fields.eml").replace(
        b"Feedback-Type: abuse", f"Feedback-Type: {feedback_type}".encode()
    )
    assert {r.kind for r in _report_of(raw).recipients} == {None}


def _report_of(raw: bytes) -> Report:
    parsed = parse_report(raw)
    assert isinstance(parsed, Report), parsed
    return parsed


@pytest.mark.parametrize(
    ("name", "recipient", "kind", "status"),
    [
        ("exim-plain.eml", "gone@example.net", "hard", "5.1.1"),
        ("qmail-plain.eml", "full@example.net", "soft", "5.2.2"),
    ],
)
def test_plain_text_bounces_name_the_failed_address_and_status(
    name: str, recipient: str, kind: str, status: str
) -> None:
    report = _report(name)
    assert report.source == "plain"
    assert [(r.recipient, r.kind, r.status) for r in report.recipients] == [(recipient, kind, status)]
    assert report.original_message_ids == ("<MSGID>",)


def test_an_ordinary_message_is_not_a_bounce() -> None:
    parsed = parse_report(b"From: ada@example.com\nSubject: hi\n\nSee gone@example.net\n550 5.1.1\n")
    assert isinstance(parsed, Unparseable)


@settings(max_examples=300, deadline=None, derandomize=CI)
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_give_a_verdict_never_an_exception(raw: bytes) -> None:
    assert isinstance(parse_report(raw), Report | Unparseable)


_FIXTURES = {name: load(name) for name in names()}


@st.composite
def mutated_reports(draw: st.DrawFn) -> bytes:
    """A real report with bytes flipped, cut, duplicated or spliced from another one."""
    data = bytearray(_FIXTURES[draw(st.sampled_from(sorted(_FIXTURES)))])
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        at = draw(st.integers(min_value=0, max_value=max(0, len(data) - 1)))
        edit = draw(st.sampled_from(["flip", "cut", "repeat", "insert", "truncate"]))
        if edit == "flip" and data:
            data[at] = draw(st.integers(min_value=0, max_value=255))
        elif edit == "cut":
            del data[at : at + draw(st.integers(min_value=1, max_value=200))]
        elif edit == "repeat":
            data[at:at] = data[at : at + draw(st.integers(min_value=1, max_value=400))] * draw(
                st.integers(min_value=2, max_value=20)
            )
        elif edit == "insert":
            data[at:at] = draw(
                st.sampled_from(
                    [
                        b"\n\n",
                        b"--",
                        b"\r\n--",
                        b'Content-Type: multipart/report; boundary="x"\n',
                        b"\x00\xff",
                        b";;=",
                        b"=?utf-8?q?=ff?=",
                    ]
                )
            )
        else:
            del data[at:]
    return bytes(data)


@settings(max_examples=400, deadline=None, derandomize=CI, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_reports())
def test_mutated_real_reports_give_a_verdict_never_an_exception(raw: bytes) -> None:
    assert isinstance(
        parse_report(raw, ["bounces+1-aaaaaaaa-aaaaaaaaaaaaaaaa@bounces.example"]), Report | Unparseable
    )


def test_deeply_nested_multiparts_give_a_verdict() -> None:
    head = b"".join(
        f'Content-Type: multipart/mixed; boundary="b{i}"\n\n--b{i}\n'.encode() for i in range(5000)
    )
    assert isinstance(parse_report(b"From: MAILER-DAEMON@x.example\n" + head), Report | Unparseable)


def test_past_its_budget_the_parser_gives_up_with_over_budget_naming_what() -> None:
    from tests.producers.bounces.pathological import many_parts, many_recipients, nested_mime
    from worker.producers.bounces.parse import OVER_BUDGET, Budget

    small = Budget(boundaries=4, content_types=8, parts=16, recipients=3)
    cases = {
        "multipart boundaries": nested_mime(2_000),
        "Content-Type headers": many_parts(2_000),
        "recipient reports": many_recipients(2_000),
    }
    for what, raw in cases.items():
        parsed = parse_report(raw, budget=small)
        assert isinstance(parsed, Unparseable) and parsed.reason.startswith(OVER_BUDGET), parsed
        assert what in parsed.reason
    # The same rfc3464 report with three recipients fits a budget of three, not of two.
    assert isinstance(parse_report(load("rfc3464-multi-recipient.eml"), budget=small), Report)
    two = Budget(recipients=2)
    assert parse_report(load("rfc3464-multi-recipient.eml"), budget=two) == Unparseable(
        f"{OVER_BUDGET}: more than 2 recipient reports"
    )


def test_only_the_first_parse_bytes_are_read() -> None:
    from worker.producers.bounces.parse import Budget

    raw = load("exim-plain.eml")
    assert isinstance(parse_report(raw), Report)
    # Cut before the failed address: the same message within a smaller budget names nobody.
    cut = raw.index(b"gone@example.net")
    parsed = parse_report(raw, budget=Budget(parse_bytes=cut))
    assert isinstance(parsed, Unparseable) and "naming no failed address" in parsed.reason


@pytest.mark.parametrize(
    ("line", "address"),
    [
        ("  ada@example.com", "ada@example.com"),
        ("<Ada@Example.com>:", "ada@example.com"),
        ("ada@example", None),
        ("ada@example..com", None),
        ("see ada@example.com", None),
        ("a." * 5000 + "@" + "a." * 5000, None),
    ],
)
def test_an_address_alone_on_a_line_is_read_without_a_repeated_group(line: str, address: str | None) -> None:
    from worker.producers.bounces.parse import _lone_address

    assert _lone_address(line) == address


@pytest.mark.parametrize(
    "line",
    [
        "------ This is a copy of the message, including all the headers. ------",
        "--- Below this line is a copy of the message.",
        "   ----- Original message -----",
        "-----Original Message-----",
    ],
)
def test_the_returned_copy_marker_is_found_line_by_line(line: str) -> None:
    from worker.producers.bounces.parse import _is_copy_marker

    assert _is_copy_marker(line)
    assert not _is_copy_marker("-" * 40_000)
