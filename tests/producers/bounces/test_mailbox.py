"""The bounce mailbox over real IMAP and POP3 on 127.0.0.1: processed messages go, the rest stay."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.producers.bounces.corpus import FIXTURE_KEY, load, readdress, sent_email
from tests.producers.bounces.mail_servers import PASSWORD, USER, Store, serving, unused_port
from worker.cli.main import main
from worker.core.return_path import derive_key
from worker.producers.bounces.mailbox import DatabaseIntake, Mailbox, MailboxError, PollResult, poll

UNKNOWN = "no-such-user@mta.example.net"
JUNK = b"From: someone@example.net\r\nSubject: buy now\r\n\r\nnothing to do with bounces\r\n"
DOWN = "postgresql://127.0.0.1:1/nothing?connect_timeout=2"

protocols = pytest.mark.parametrize("protocol", ["imap", "pop3"])


def _mailbox(protocol: str, port: int, **changes: Any) -> Mailbox:
    fields: dict[str, Any] = {
        "protocol": protocol,
        "host": "127.0.0.1",
        "port": port,
        "user": USER,
        "password": PASSWORD,
        "security": "none",
        "timeout": 10.0,
        **changes,
    }
    return Mailbox(**fields)


def _poll(mailbox: Mailbox, url: str) -> PollResult:
    with DatabaseIntake(url, FIXTURE_KEY) as intake:
        return poll(mailbox, intake)


def _dsn(db_url: str, key: bytes = FIXTURE_KEY) -> tuple[int, bytes]:
    email = sent_email(db_url, UNKNOWN)
    return email["id"], readdress(load("postfix-unknown-user.eml"), email["id"], UNKNOWN, key)


def _one(db_url: str, query: str, *params: object) -> Any:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _status(db_url: str, email_id: int) -> str:
    return str(_one(db_url, "SELECT status FROM mailroom.email_queue WHERE id = %s", email_id))


@protocols
def test_a_dsn_in_the_mailbox_bounces_the_email_and_is_deleted(protocol: str, db_url: str) -> None:
    email_id, raw = _dsn(db_url)
    store = Store()
    store.deliver(raw)
    with serving(protocol, store) as port:
        result = _poll(_mailbox(protocol, port), db_url)
    assert (result.fetched, result.deleted, result.verdicts) == (1, 1, {"recorded": 1})
    assert _status(db_url, email_id) == "bounced"
    assert _one(db_url, "SELECT bounce_type FROM mailroom.bounce_list WHERE email = %s", UNKNOWN) == "hard"
    assert store.raws() == []


@protocols
def test_a_message_polled_while_the_database_is_down_stays_for_the_next_poll(
    protocol: str, db_url: str
) -> None:
    email_id, raw = _dsn(db_url)
    store = Store()
    store.deliver(raw)
    store.deliver(JUNK)
    with serving(protocol, store) as port:
        down = _poll(_mailbox(protocol, port), DOWN)
        assert (down.fetched, down.failed, down.deleted, down.remaining) == (1, 1, 0, 1)
        assert down.stopped is not None
        assert store.raws() == [raw, JUNK]
        assert _status(db_url, email_id) == "sent"
        up = _poll(_mailbox(protocol, port), db_url)
    assert up.verdicts == {"recorded": 1, "quarantined": 1}
    assert _status(db_url, email_id) == "bounced"
    assert store.raws() == []


@protocols
def test_a_redelivered_message_changes_nothing_twice_and_is_deleted(protocol: str, db_url: str) -> None:
    email_id, raw = _dsn(db_url)
    store = Store()
    with serving(protocol, store) as port:
        for expected in ("recorded", "duplicate"):
            store.deliver(raw)
            result = _poll(_mailbox(protocol, port), db_url)
            assert (result.verdicts, result.deleted) == ({expected: 1}, 1)
    assert store.raws() == []
    assert _one(db_url, "SELECT count(*) FROM mailroom.bounce_events WHERE email_id = %s", email_id) == 1
    assert _one(db_url, "SELECT bounce_count FROM mailroom.bounce_list WHERE email = %s", UNKNOWN) == 1


@protocols
def test_junk_goes_to_the_quarantine_and_is_deleted(protocol: str, db_url: str) -> None:
    store = Store()
    store.deliver(JUNK)
    with serving(protocol, store) as port:
        result = _poll(_mailbox(protocol, port), db_url)
    assert (result.verdicts, result.deleted) == ({"quarantined": 1}, 1)
    assert "not a delivery report" in _one(db_url, "SELECT reason FROM mailroom.bounce_quarantine")
    assert store.raws() == []


@protocols
def test_a_poll_takes_at_most_max_messages(protocol: str, db_url: str) -> None:
    store = Store()
    for n in range(3):
        store.deliver(JUNK.replace(b"buy now", b"offer %d" % n))
    with serving(protocol, store) as port:
        result = _poll(_mailbox(protocol, port, max_messages=2), db_url)
    assert (result.fetched, result.deleted, result.remaining) == (2, 2, 1)
    assert store.raws() == [JUNK.replace(b"buy now", b"offer 2")]


@pytest.mark.parametrize("move", [True, False], ids=["MOVE", "COPY-and-delete"])
def test_imap_moves_processed_messages_to_the_folder_given(move: bool, db_url: str) -> None:
    store = Store()
    store.folders["Processed"] = []
    store.deliver(JUNK)
    with serving("imap", store, move=move) as port:
        result = _poll(_mailbox("imap", port, move_to="Processed"), db_url)
    assert result.deleted == 1
    assert (store.raws(), store.raws("Processed")) == ([], [JUNK])
    assert ("UID MOVE" in store.commands) is move


def test_a_pop3_session_cut_before_quit_keeps_its_messages_and_they_count_once(
    db_url: str, request: pytest.FixtureRequest
) -> None:
    email_id, raw = _dsn(db_url)
    store = Store()
    store.deliver(raw)
    store.deliver(JUNK)
    calls: list[bytes] = []
    intake = DatabaseIntake(db_url, FIXTURE_KEY)
    request.addfinalizer(intake.close)

    def cut_on_the_second(message: bytes) -> Any:
        calls.append(message)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the poller killed mid-poll: no QUIT, so no DELE is applied
        return intake(message)

    with serving("pop3", store) as port:
        with pytest.raises(KeyboardInterrupt):
            poll(_mailbox("pop3", port), cut_on_the_second)
        assert len(store.raws()) == 2
        again = poll(_mailbox("pop3", port), intake)
    assert again.verdicts == {"duplicate": 1, "quarantined": 1}
    assert store.raws() == []
    assert _one(db_url, "SELECT count(*) FROM mailroom.bounce_events WHERE email_id = %s", email_id) == 1


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made here, so no test depends on a system CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mailroom test mailbox")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return folder / "cert.pem", folder / "key.pem"


@pytest.fixture
def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    """The test servers' TLS context."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


@protocols
@pytest.mark.parametrize("security", ["tls", "starttls"])
def test_tls_verifies_the_certificate_and_then_polls(
    protocol: str, security: str, db_url: str, server_tls: ssl.SSLContext, certificate: tuple[Path, Path]
) -> None:
    store = Store()
    store.deliver(JUNK)
    with serving(protocol, store, server_tls, implicit_tls=security == "tls") as port:
        untrusted = _mailbox(protocol, port, security=security)
        with pytest.raises(MailboxError, match="CERTIFICATE_VERIFY_FAILED"):
            _poll(untrusted, db_url)
        assert store.raws() == [JUNK]
        trusted = _mailbox(protocol, port, security=security, cafile=str(certificate[0]))
        result = _poll(trusted, db_url)
    assert result.deleted == 1
    assert store.raws() == []


def test_plain_text_is_refused_for_a_host_that_is_not_loopback() -> None:
    with pytest.raises(MailboxError, match=r"only for 127\.0\.0\.1"):
        _poll(_mailbox("imap", 143, host="mail.example.org"), DOWN)


@protocols
def test_a_wrong_password_is_a_mailbox_error(protocol: str) -> None:
    store = Store()
    store.deliver(JUNK)
    with serving(protocol, store) as port, pytest.raises(MailboxError, match=r"(?i)invalid credentials"):
        _poll(_mailbox(protocol, port, password="wrong"), DOWN)
    assert store.raws() == [JUNK]


@protocols
def test_poll_command_processes_the_mailbox_with_the_password_from_the_environment(
    protocol: str,
    db_url: str,
    cli_env: dict[str, str],
    secret_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    email_id, raw = _dsn(db_url, derive_key(secret_key))
    store = Store()
    store.deliver(raw)
    monkeypatch.setenv("BOUNCE_PASSWORD", PASSWORD)
    args = ["--user", USER, "--password-env", "BOUNCE_PASSWORD", "--insecure", "--once"]
    with serving(protocol, store) as port:
        assert main(["bounces", "poll", f"--{protocol}", f"127.0.0.1:{port}", *args]) == 0
    assert "1 fetched (1 recorded), 1 deleted" in capsys.readouterr().out
    assert _status(db_url, email_id) == "bounced"
    assert store.raws() == []


def test_poll_command_exit_status_tells_a_mailbox_down_from_a_database_down(
    cli_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    args = ["--user", USER, "--password-file", str(password), "--insecure"]
    assert main(["bounces", "poll", "--pop3", f"127.0.0.1:{unused_port()}", *args]) == 1
    assert "error: pop3 127.0.0.1" in capsys.readouterr().err
    store = Store()
    store.deliver(JUNK)
    monkeypatch.setenv("MAILROOM_DATABASE_URL", DOWN)
    with serving("pop3", store) as port:
        assert main(["bounces", "poll", "--pop3", f"127.0.0.1:{port}", *args]) == 75
    assert "database unavailable" in capsys.readouterr().err
    assert store.raws() == [JUNK]


def test_poll_command_without_the_password_is_a_usage_error(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BOUNCE_PASSWORD", raising=False)
    argv = ["bounces", "poll", "--imap", "127.0.0.1", "--user", USER, "--password-env", "BOUNCE_PASSWORD"]
    assert main(argv) == 2
    assert "no password in $BOUNCE_PASSWORD" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ([], "give --imap or --pop3"),
        (["--imap", "127.0.0.1", "--pop3", "127.0.0.1"], "--imap and --pop3 cannot be given together"),
        (["--imap", "127.0.0.1", "--password-file", "pw"], "--password-env and --password-file cannot"),
        (["--imap", "127.0.0.1", "--starttls", "--insecure"], "--starttls and --insecure cannot"),
        (["--imap", "127.0.0.1", "--once", "--every", "60"], "--once and --every cannot"),
    ],
)
def test_poll_command_takes_one_server_one_password_one_security_and_one_schedule(
    options: list[str], error: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bounces", "poll", "--user", USER, "--password-env", "BOUNCE_PASSWORD", *options]
    assert main(argv) == 2
    assert error in capsys.readouterr().err
