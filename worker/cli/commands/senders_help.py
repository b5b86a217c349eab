"""What `mailroom senders --help` and each of its actions say: kept apart so `senders.py` stays about the work."""

from __future__ import annotations

SENDERS = """\
Add, edit, list, pause, resume, suspend and remove the SMTP accounts email goes out through. Every
change is recorded in the audit trail (`mailroom audit`). Passwords never go on the command line:
they come from an environment variable, a file, or a prompt on a terminal.

Examples:
  SMTP_PASSWORD=... mailroom senders add transactional-1 --from noreply@example.com \\
      --host smtp.example.com --port 587 --username mailer --password-env SMTP_PASSWORD
  mailroom senders list
  mailroom senders edit transactional-1 --daily-limit 5000
  mailroom senders suspend transactional-1 --reason 'credentials revoked'"""

ADD = """\
Add an SMTP sender account. The password is stored encrypted with MAILROOM_SECRET_KEY and is never a
flag value (it would show in `ps` and the shell history): give the name of an environment variable
holding it (--password-env), a file holding it (--password-file, first line), or type it at the
prompt. On a terminal, what is missing is asked for: the security (none, starttls, tls), the port
and the login (username, then the password, not echoed). Without a terminal nothing is asked: a
port or security left out is defaulted with a warning on standard error, a login without a password
is refused, and doubtful choices (implicit TLS on 587, no TLS to a remote host, no login) are
warned about. A login (password or OAuth2) with --security none to a host other than localhost is
refused: the secret would cross the network readable by anyone on the path; --allow-plaintext-login
allows it knowingly (the worker refuses such a login too when the account does not allow it).
Other accounts are left alone.

OAuth2 (Gmail, Microsoft 365, which refuse passwords): --auth oauth2 logs in with SMTP AUTH
XOAUTH2 as the mailbox (--username; the From address when left out), with access tokens the worker
gets from the token endpoint (--oauth-provider google, --oauth-provider microsoft with
--oauth-tenant, or --oauth-token-url) using the client id, the client secret and a refresh token.
The secret and the refresh token are stored encrypted and come like a password: from a variable
(--oauth-client-secret-env, --oauth-refresh-token-env), a file (...-file) or a prompt (...-prompt).
--bounce-domain gives the account's own domain for VERP return paths; --relay-provider postmark
or sendgrid tags each message so that relay's bounce webhooks name the email.
Exit status 0 when added, 2 when a setting is invalid, the name is taken or a password or an
OAuth2 setting is missing.

Examples:
  SMTP_PASSWORD=... mailroom senders add transactional-1 --from noreply@example.com \\
      --host smtp.example.com --port 587 --security starttls --username mailer \\
      --password-env SMTP_PASSWORD --daily-limit 5000
  mailroom senders add relay --from noreply@example.com --host smtp.example.com \\
      --username mailer --password-file /run/secrets/smtp
  mailroom senders add local --from dev@example.com --host 127.0.0.1 --port 2525 --security none
  CLIENT_SECRET=... REFRESH_TOKEN=... mailroom senders add gmail --from me@example.com \\
      --host smtp.gmail.com --port 587 --security starttls --auth oauth2 --oauth-provider google \\
      --oauth-client-id 1234.apps.googleusercontent.com --oauth-client-secret-env CLIENT_SECRET \\
      --oauth-refresh-token-env REFRESH_TOKEN
  mailroom senders add relay --from noreply@example.com --host smtp.postmarkapp.com \\
      --username TOKEN --password-env PM_TOKEN --bounce-domain bounces.example.com \\
      --relay-provider postmark"""

EDIT = """\
Change the settings of a sender account: only the options given change, checked as when the
account was added (the same warnings, the same refusal of a login without a password). Its status,
today's usage, DKIM key and name are left alone, except that a new daily or warm-up limit settles
its state at once: an account paused at its limit sends again when the new limit is above what it
sent today. --auth password or oauth2 switches how it logs in (to oauth2: give the endpoint,
the client id, secret and refresh token; back to password: a password; the other kind's secrets
are removed); a new refresh token replaces the stored one. --bounce-domain '' (or
--no-bounce-domain) and --relay-provider none remove those settings. --version N applies the
change only if nobody changed the account since you read version N (`mailroom senders list
--json`). The edit is audited as sender.edit, with the settings
that changed (never a password). A worker uses the new settings from its next claim.
Exit status 0 when edited, 1 when there is no such account or the version is stale, 2 when a
setting is invalid.

Examples:
  mailroom senders edit transactional-1 --daily-limit 5000 --send-delay-ms 200
  SMTP_PASSWORD=... mailroom senders edit transactional-1 --password-env SMTP_PASSWORD
  mailroom senders edit relay --host smtp2.example.com --port 465 --security tls --version 7
  REFRESH_TOKEN=... mailroom senders edit gmail --oauth-refresh-token-env REFRESH_TOKEN
  mailroom senders edit relay --bounce-domain bounces.example.com --relay-provider sendgrid"""

LIST = """\
List sender accounts: status (unreachable when the relay fails; an account paused at yesterday's
limit shows as sending again), today's usage against its limit (UTC day), warm-up, From address
and SMTP host, and how it logs in (password or oauth2), all printed whole (a row wider than the
terminal wraps). For an unreachable account a second line says since when and why; one with its
own bounce domain or relay provider says so on a line below. Never a password or OAuth2 secret.
Changes nothing. Exit status 0.

Examples:
  mailroom senders list
  mailroom senders list --json | jq '.[] | {name, status, sent_today, effective_limit}'"""

PAUSE = """\
Stop sending through an account until it is resumed; emails go out through the other accounts.
Emails being sent right now finish. Suspended accounts are refused (and left alone).
Exit status 0 when paused, 1 when there is no such account or it cannot be paused.

Example:
  mailroom senders pause transactional-1 --reason 'relay maintenance'"""

RESUME = """\
Send through a paused or suspended account again (warming up again if its warm-up is not over).
An account that has already reached today's limit shows as paused at its limit and resumes by
itself at 00:00 UTC; one paused at its limit is resumed now only if its limit was raised.
Exit status 0 when resumed, 1 when there is no such account or it is not paused or suspended.

Example:
  mailroom senders resume transactional-1"""

SUSPEND = """\
Take an account out of service (credentials revoked, a relay that rejects it). Unlike pause, it
says something is wrong; a worker suspends an account by itself when the relay refuses its login.
Emails being sent right now finish. Exit status 0 when suspended, 1 when there is no such account
or it is suspended already.

Example:
  mailroom senders suspend transactional-1 --reason 'credentials revoked'"""

REMOVE = """\
Delete a sender account with its usage and pacing rows. Refused while emails are bound to it
(pending or being sent through it, or claimed by a worker), saying how many: pause it so that the
other accounts take them over, or cancel them, then remove it. Sent email and the send log keep
their history. Asks on a terminal unless --yes; without a terminal --yes is required. Audited as
sender.remove.
Exit status 0 when removed, 1 when refused, not confirmed or there is no such account, 2 without
--yes off a terminal.

Examples:
  mailroom senders remove old-relay
  mailroom senders remove old-relay --yes"""
