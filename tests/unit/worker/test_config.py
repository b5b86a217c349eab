"""Every setting is declared once: the field it fills, how it is read, what it means."""

from __future__ import annotations

import dataclasses

import pytest

from worker.core.config import DECLARED, ConfigError, Setting, Settings


def test_every_field_of_settings_is_declared_once() -> None:
    declared = [s.field for s in DECLARED if s.field is not None]
    assert sorted(declared) == sorted(f.name for f in dataclasses.fields(Settings))
    names = [s.env for s in DECLARED]
    assert len(set(names)) == len(names)
    assert all(name.startswith("MAILROOM_") for name in names)
    assert all(s.meaning and "\n" not in s.meaning for s in DECLARED)


def test_a_declared_default_is_the_field_default() -> None:
    lease = next(s for s in DECLARED if s.env == "MAILROOM_LEASE_SECONDS")
    assert lease.default == Settings().lease_seconds == 300.0
    log_format = next(s for s in DECLARED if s.env == "MAILROOM_LOG_FORMAT")
    assert log_format.field is None and log_format.default == "text"


@pytest.mark.parametrize("setting", [s for s in DECLARED if s.field is not None], ids=lambda s: s.env)
def test_from_env_reads_each_declared_variable(setting: Setting, monkeypatch: pytest.MonkeyPatch) -> None:
    assert setting.field is not None
    for other in DECLARED:
        monkeypatch.delenv(other.env, raising=False)
    unset = getattr(Settings.from_env(), setting.field)
    monkeypatch.setenv(setting.env, "x")
    try:
        value, refused = getattr(Settings.from_env(), setting.field), ""
    except ConfigError as exc:
        value, refused = unset, str(exc)
    # Either refused, naming the variable, or taken.
    assert (setting.env in refused) if refused else (value != unset)


def test_malformed_numbers_keep_their_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILROOM_LEASE_SECONDS", "0")
    with pytest.raises(ConfigError, match=r"^MAILROOM_LEASE_SECONDS must be at least 0\.1, got 0\.0$"):
        Settings.from_env()
    monkeypatch.setenv("MAILROOM_LEASE_SECONDS", "60")
    monkeypatch.setenv("MAILROOM_MAX_RECIPIENTS", "101")
    with pytest.raises(ConfigError, match=r"^MAILROOM_MAX_RECIPIENTS must be at most 100, got 101$"):
        Settings.from_env()
    monkeypatch.setenv("MAILROOM_MAX_RECIPIENTS", "many")
    with pytest.raises(ConfigError, match=r"^MAILROOM_MAX_RECIPIENTS must be a whole number, got 'many'$"):
        Settings.from_env()
