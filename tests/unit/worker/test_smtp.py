"""SMTP account settings as the engine holds them."""

from __future__ import annotations

from worker.engine.smtp import SmtpAccount


def test_an_smtp_account_never_shows_its_password() -> None:
    account = SmtpAccount(1, "smtp.example.com", 587, "starttls", "mailer", "hunter2-secret")
    assert "hunter2-secret" not in repr(account)
    assert "hunter2-secret" not in str(account)
