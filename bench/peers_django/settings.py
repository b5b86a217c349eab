"""Django settings for bench.peers: django-post-office on PostgreSQL, sending to the benchmark's sink.

Run by the peers' virtualenv (Django is no dependency of Mailroom), with PEERS_DATABASE_URL (a libpq
URL or conninfo) and PEERS_SMTP_PORT (the sink on 127.0.0.1) in the environment. Tuned as the
issue says: `send_queued_mail --processes 2` with batches of 1000; everything else is
post-office's default (5 threads a process, each with one SMTP connection it reuses; a log row
for every email sent, as Mailroom writes a send log for every attempt).
"""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["PEERS_DATABASE_URL"])

SECRET_KEY = "bench-peers-not-secret"  # noqa: S105 - a throwaway benchmark project
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["post_office"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
# post-office renders every subject and body as a Django template, even without a template.
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]

# Django's SMTP backend, pointed at the sink: post-office sends through it.
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = int(os.environ.get("PEERS_SMTP_PORT", "25"))
EMAIL_USE_TLS = False
DEFAULT_FROM_EMAIL = "bench@example.org"

POST_OFFICE = {
    "BACKENDS": {"default": EMAIL_BACKEND},
    "BATCH_SIZE": 1000,
    "DEFAULT_PRIORITY": "medium",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"post_office": {"level": "WARNING"}},
}
