"""What `mailroom docs --help` and each of its actions say: kept apart so `docs.py` stays about the work."""

from __future__ import annotations

DOCS = """\
Signed document acknowledgements (reference 04). Mailroom signs each acknowledgement with its
Ed25519 key (MAILROOM_SIGNING_KEY, else $MAILROOM_HOME/signing.key, created on first use with mode
0600) and chains the signatures of a document so that any edit of a stored one is detected by
`verify`.

Examples:
  mailroom docs add policy-2026 --title "Security policy" --file policy.pdf
  mailroom docs expect policy-2026 ada@example.com --name "Ada Lovelace" --locale fr
  mailroom docs remind policy-2026
  mailroom docs verify"""

ADD = """\
Add a document. Give its checksum as hex (--checksum) or let Mailroom compute it (--file); the file
itself is not stored. A document that exists already is refused and left alone.
Exit status 0, 2 when the id, link or checksum is invalid or the document exists.

Examples:
  mailroom docs add policy-2026 --title "Security policy" --file policy.pdf
  mailroom docs add nda-7 --checksum 9f86d081884c7d65... --url https://intra.example.com/nda-7"""

EXPECT = """\
Expect EMAIL to sign DOC (or update that signer's name and locale). Reminders go out in the
signer's locale (en, fr, es, de, it; a regional form such as fr-CA falls back to its language).
Signatures already given are left alone. Exit status 0, 2 when the document or address is invalid.

Example:
  mailroom docs expect policy-2026 ada@example.com --name "Ada Lovelace" --locale fr"""

SIGN = """\
Sign DOC for EMAIL with Mailroom's Ed25519 key, chained to the document's previous signature. One
signature per signer and document; a signer who was not expected may still sign (`status` lists
them as unexpected). Other signatures are left alone.
Exit status 0, 2 when the document is unknown or EMAIL has signed it already.

Example:
  mailroom docs sign policy-2026 ada@example.com"""

STATUS = """\
Show DOC's expected signers, who signed and when, its completion, who is missing and who signed
without being expected. Changes nothing. Exit status 0, 2 when the document is unknown.

Examples:
  mailroom docs status policy-2026
  mailroom docs status policy-2026 --json | jq .missing"""

VERIFY = """\
Check each signature's canonical payload, its SHA-256, its Ed25519 signature and its link to the
previous signature, and that every position the document's chain head records is there (a deleted
signature, the newest or any other, is named by its position). With --head FILE, also check against
heads exported earlier by `docs head`, which catches removals even if the head table was rewritten
too. Changes nothing. Exit status 0 when all is intact, 1 when anything is broken or missing.

Examples:
  mailroom docs verify
  mailroom docs verify policy-2026 --head heads-2026-11-25.json"""

HEAD = """\
Print the chain head of each document (default: all): its signature count and the hash the newest
signature ends the chain with. Keep the output somewhere the database's writers cannot reach (a
ticket, another host, a printout) and check later with `docs verify --head FILE`. Changes nothing.
Exit status 0, 1 when a document named is unknown.

Example:
  mailroom docs head --json > heads-2026-11-25.json"""

REMOVE_SIGNATURES = """\
Remove every signature of DOC (a privacy erase, a test document) through
mailroom.signature_maintenance(): one `signatures.maintenance` audit row with the reason, and the
chain head reset to an empty chain, in one transaction. The document and its expected signers are
left alone. Heads exported earlier will report the removal and name the audit row; export them again
afterwards. Asks on a terminal unless --yes; without a terminal --yes is required.
Exit status 0 when removed, 1 when not confirmed, 2 without --yes off a terminal.

Example:
  mailroom docs remove-signatures nda-7 --reason "test document" --yes"""

REMIND = """\
Enqueue one reminder per expected signer who has not signed, in their locale, and log it; its
outcome (sent, failed, bounced, ...) is recorded once delivered. A signer reminded within the
interval (MAILROOM_REMINDER_INTERVAL_SECONDS, default one day; failed or cancelled reminders do not
count) or on the bounce list is skipped with the reason. Signers who signed are left alone.
Exit status 0, 1 when a signer was skipped.

Examples:
  mailroom docs remind policy-2026 --dry-run
  mailroom docs remind policy-2026"""

CHECKSUM = """\
Hash PATH with the document's algorithm and record a verification row: valid, or not with the
reason. The document's stored checksum is left as it is.
Exit status 0 when the file matches, 1 when it does not.

Example:
  mailroom docs checksum policy-2026 --file policy.pdf"""
