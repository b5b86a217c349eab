"""`mailroom suppressions export|import`: no formula reaches a spreadsheet, a bad file imports nothing and
names its bad lines, a good one imports once however often it is given."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.cli import run
from tests.ops.suppression_helpers import audit_rows, events, list_bounce, listed
from worker.ops.suppression_csv import safe_cell, unescape_cell

pytestmark = pytest.mark.usefixtures("cli_env")


def _write(tmp_path: Path, text: str, name: str = "list.csv") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "text",
    ['=HYPERLINK("http://evil")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx", "'=x", "plain"],
)
def test_a_cell_is_escaped_so_no_spreadsheet_runs_it_and_comes_back_unchanged(text: str) -> None:
    escaped = safe_cell(text)
    assert not escaped.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert unescape_cell(escaped) == text


def test_export_escapes_formulas_in_addresses_and_reasons_and_import_reads_them_back(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    # Both are outsiders' text: an address may start with = or + (atext), a reason quotes a relay.
    list_bounce(db_url, "=cmd@example.com", reason='=HYPERLINK("http://evil.example","click")')
    list_bounce(db_url, "+x@example.com", kind="complaint", reason="@SUM(1+1)")
    target = tmp_path / "out.csv"
    code, _, err = run(capsys, "suppressions", "export", str(target))
    assert code == 0 and "exported 2 address(es)" in err
    rows = list(csv.reader(io.StringIO(target.read_text(encoding="utf-8"))))
    assert rows[0] == ["address", "kind", "reason", "since"]
    cells = [cell for row in rows[1:] for cell in row]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@"))]
    assert {r[0] for r in rows[1:]} == {"'=cmd@example.com", "'+x@example.com"}

    code, _, _ = run(capsys, "suppressions", "remove", "=cmd@example.com", "--reason", "r")
    code, _, _ = run(capsys, "suppressions", "remove", "+x@example.com", "--reason", "r", "--force")
    assert listed(db_url) == {}
    code, _, err = run(capsys, "suppressions", "import", str(target))
    assert code == 0, err
    assert listed(db_url) == {"=cmd@example.com": "hard", "+x@example.com": "complaint"}


# What a spreadsheet may split a line on (its separator setting), and what must not begin a cell.
SEPARATORS = (",", ";", "\t", "|")
RISKY = ("=", "+", "-", "@", "\t", "\r")
OUTSIDERS_REASONS = {
    "semicolon@example.com": 'user unknown;=HYPERLINK("http://evil.example","click")',
    "comma@example.com": "mailbox full, -2+3",
    "pipe@example.com": "relay said|@SUM(1+1)",
    "tab@example.com": "see below\t+cmd",
    "quoted@example.com": 'over quota; "=1+1"',
    "spaced@example.com": "550;   =1+1",
    "x|=cmd@example.com": "plain",
}


def _cells_a_spreadsheet_may_make(text: str) -> list[str]:
    """Every cell a spreadsheet splitting on any one separator could start (quotes not honoured),
    with the spaces and quotes an import may trim taken off the front."""
    return [piece.lstrip(' "') for sep in SEPARATORS for piece in text.split(sep)]


def test_export_neutralises_a_formula_after_any_separator_inside_a_field(
    capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    # A reason reaches the list from anyone's DSN: a spreadsheet splitting on ';' started a cell at
    # '=HYPERLINK(...)' in the middle of the reason and ran it.
    for address, reason in OUTSIDERS_REASONS.items():
        list_bounce(db_url, address, reason=reason)
    code, out, _ = run(capsys, "suppressions", "export")
    assert code == 0
    assert [c for c in _cells_a_spreadsheet_may_make(out) if c.startswith(RISKY)] == []
    rows = list(csv.reader(io.StringIO(out)))[1:]
    assert {unescape_cell(r[0]): unescape_cell(r[2]) for r in rows} == OUTSIDERS_REASONS


def test_within_a_field_every_place_a_cell_could_start_is_escaped_and_comes_back() -> None:
    texts = ["a;=b", "a,-b", "a|@b", "a\t+b", 'a; "=b', "\t\t=", "a;'=b", "a,'b", "''", "a;\r=b", " =x"]
    for text in texts:
        escaped = safe_cell(text)
        assert [c for c in _cells_a_spreadsheet_may_make(escaped) if c.startswith(RISKY)] == [], text
        assert unescape_cell(escaped) == text


def test_export_to_standard_output_and_of_one_kind(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    list_bounce(db_url, "a@example.com")
    list_bounce(db_url, "b@example.com", kind="manual")
    code, out, _ = run(capsys, "suppressions", "export", "--kind", "manual")
    assert code == 0 and out.splitlines()[1].startswith("b@example.com,manual,")
    assert len(out.splitlines()) == 2


def test_a_providers_file_imports_once_whatever_its_columns_and_words(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    path = _write(
        tmp_path,
        "\ufeffEmail Address,Type,Created,Description\r\n"  # a spreadsheet's byte-order mark, CRLF
        "Ada@Example.COM,bounce,2024-01-01,550 no such user\r\n"
        "bob@example.com,Spam Report,2024-01-02,\r\n"
        'carol@example.com,unsubscribed,2024-01-03,"said so\nby phone"\r\n'
        "\r\n"
        "dave@example.com,,2024-01-04,\r\n"
        "ADA@example.com,hard,2024-01-05,repeated in the file\r\n",
    )
    code, out, err = run(capsys, "suppressions", "import", path)
    assert code == 0, err
    assert (
        out.strip()
        == "suppressions: imported 5 line(s): 4 address(es) added, 1 already suppressed or repeated"
    )
    assert listed(db_url) == {
        "ada@example.com": "hard",
        "bob@example.com": "complaint",
        "carol@example.com": "unsubscribe",
        "dave@example.com": "manual",
    }
    assert events(db_url, "ada@example.com")[0][:4] == ("listed", "hard", "import", "550 no such user")
    assert events(db_url, "carol@example.com")[0][3] == "said so by phone"
    # the same file again: nothing new, in the lists or the history
    code, out, _ = run(capsys, "suppressions", "import", path)
    assert code == 0 and "0 address(es) added, 5 already" in out
    assert len(events(db_url, "ada@example.com")) == 1
    actions = [(a, d["added"]) for a, _, _, d in audit_rows(db_url, "suppression.")]
    assert actions == [("suppression.import", 4), ("suppression.import", 0)]


def test_an_import_never_weakens_a_listing(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    list_bounce(db_url, "angry@example.com", kind="complaint")
    list_bounce(db_url, "soft@example.com", kind="soft")
    code, _, _ = run(
        capsys,
        "suppressions",
        "import",
        _write(tmp_path, "email,kind\nangry@example.com,manual\nsoft@example.com,\n"),
    )
    assert code == 0
    assert listed(db_url) == {"angry@example.com": "complaint", "soft@example.com": "manual"}


def test_bad_lines_are_named_by_number_and_nothing_is_imported(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path
) -> None:
    path = _write(
        tmp_path,
        "address,kind,reason\n"
        "good@example.com,hard,fine\n"
        "not-an-address,hard,\n"
        "ok@example.com,soft,\n"
        "x@example.com,frobnicated,\n"
        "\n"
        "y@example.com,hard,bad\x1b]0;title\x07reason\n"
        "z@example.com,hard," + "r" * 5000 + "\n"
        "last@example.com,manual,fine\n",
    )
    code, out, err = run(capsys, "suppressions", "import", path)
    assert code == 1 and out == ""
    bad = [line.split(":", 2)[1] for line in err.splitlines() if line.startswith(path)]
    assert bad == ["3", "4", "5", "7", "8"]
    assert "soft bounce is not imported" in err and "frobnicated" in err and "4096" in err
    assert "\x1b" not in err  # the file's control characters are shown escaped
    assert "nothing imported: 5 bad line(s)" in err
    assert listed(db_url) == {} and audit_rows(db_url, "suppression.") == []


@pytest.mark.parametrize(
    ("content", "line", "says"),
    [
        (b"", 1, "empty"),
        (b"name,phone\nada,123\n", 1, "no address column"),
        (b'address\nada@example.com\n"broken@example.com\n', 3, "CSV"),
        (b"address\nada@example.com\n\xff\xfe@example.com\n", 3, "UTF-8"),
        (b"address\nada@example.com\nnul\x00@example.com\n", 3, "control character"),
        (b"address\n" + b"a" * (2 * 1024 * 1024), 2, "longer than"),
        (b"address\n" + b"a" * 100_000 + b"@example.com\n", 2, "CSV"),
    ],
)
def test_a_malformed_file_imports_nothing(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path, content: bytes, line: int, says: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    code, _, err = run(capsys, "suppressions", "import", str(path))
    assert code == 1
    assert f"{path}:{line}:" in err and says in err
    assert listed(db_url) == {}


def test_a_large_file_imports_whole(capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path) -> None:
    lines = "".join(f"user{i}@example.com,hard,r{i}\n" for i in range(20_000))
    code, out, err = run(capsys, "suppressions", "import", _write(tmp_path, "address,kind,reason\n" + lines))
    assert code == 0, err
    assert "20000 address(es) added" in out and len(listed(db_url)) == 20_000
    # one bad line at the end of a large file: still nothing half-imported
    more = "".join(f"more{i}@example.com,hard,\n" for i in range(20_000)) + "oops,hard,\n"
    code, _, err = run(
        capsys, "suppressions", "import", _write(tmp_path, "address,kind\n" + more, "more.csv")
    )
    assert code == 1 and ":20002:" in err and len(listed(db_url)) == 20_000


def test_an_unreadable_file_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "suppressions", "import", str(tmp_path / "missing.csv"))
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, "suppressions", "export", str(tmp_path / "no" / "such" / "dir.csv"))
    assert code == 2 and "cannot write" in err
