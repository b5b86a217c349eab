#!/bin/sh
# `mailroom bounces poll` against a real IMAP and POP3 server: Dovecot (Debian packages).
#
# Not part of the test suite (the suite uses the small in-process servers of
# tests/producers/bounces/mail_servers.py). Run as root on Debian or Ubuntu, from anywhere:
#     sh bench/mailbox_dovecot.sh [WORKDIR]
# It installs dovecot-imapd and dovecot-pop3d (apt-get) unless already there, then runs a private
# Dovecot instance (its own configuration, run and state directories and log under WORKDIR, default
# /tmp/mr-dovecot; the system's /etc/dovecot untouched, the packaged service not started) listening
# on 127.0.0.1 only: IMAP 10143 (STARTTLS) and 10993 (TLS), POP3 10110 (STLS) and 10995 (TLS),
# with a certificate for 127.0.0.1 made here and plain-text logins refused. One user, `bounces`,
# with a Maildir owned by `nobody`. Mailroom uses an embedded PostgreSQL in WORKDIR/home.
#
# It enqueues an email to no-such-user@mta.example.net, records it sent, drops the real Postfix DSN
# tests/fixtures/bounces/postfix-unknown-user.eml (readdressed to that email's return path) into
# the Maildir, and polls:
#   1. IMAP, STARTTLS, --move-to Processed       -> recorded, email bounced, message in Processed
#   2. the same DSN again, plus junk, over POP3 TLS -> duplicate + quarantined, both deleted
#   3. a DSN while the database is down (IMAP TLS) -> exit 75 before the mailbox is touched: it stays
#   4. IMAP TLS again with the database back       -> duplicate, deleted
#   5. without --cafile                            -> exit 1, certificate not trusted
# Dovecot is stopped at the end.
set -eu
BASE=${1:-/tmp/mr-dovecot}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
UNKNOWN=no-such-user@mta.example.net
PASSWORD="bounce-mailbox-pass"

if ! command -v dovecot >/dev/null || [ ! -e /usr/lib/dovecot/imap ] || [ ! -e /usr/lib/dovecot/pop3 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y dovecot-imapd dovecot-pop3d >/dev/null
fi

mailroom() {
    (cd "$ROOT" && "$PY" -m worker.cli.main "$@")
}

maildir_count() {
    find "$BASE/mail/bounces/Maildir/$1" -type f 2>/dev/null | wc -l
}

drop() {  # drop a message into the Maildir as local delivery would
    name="$(date +%s).$$_$2.mr-test"
    cp "$1" "$BASE/mail/bounces/Maildir/new/$name"
    chown nobody:nogroup "$BASE/mail/bounces/Maildir/new/$name"
}

dovecot -c "$BASE/dovecot.conf" stop 2>/dev/null || true
rm -rf "$BASE"
mkdir -p "$BASE/run" "$BASE/state" "$BASE/mail/bounces/Maildir/new" "$BASE/mail/bounces/Maildir/cur" \
    "$BASE/mail/bounces/Maildir/tmp" "$BASE/home"
chmod 755 "$BASE"
chown -R nobody:nogroup "$BASE/mail"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
    -addext "subjectAltName=IP:127.0.0.1" -keyout "$BASE/key.pem" -out "$BASE/cert.pem" 2>/dev/null
printf 'bounces:{PLAIN}%s::::::\n' "$PASSWORD" > "$BASE/users"
printf '%s\n' "$PASSWORD" > "$BASE/password"
chmod 600 "$BASE/password"

cat > "$BASE/dovecot.conf" <<CONF
base_dir = $BASE/run
state_dir = $BASE/state
log_path = $BASE/dovecot.log
protocols = imap pop3
listen = 127.0.0.1
ssl = yes
ssl_cert = <$BASE/cert.pem
ssl_key = <$BASE/key.pem
ssl_min_protocol = TLSv1.2
disable_plaintext_auth = yes
auth_mechanisms = plain
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u $BASE/users
}
userdb {
  driver = static
  args = uid=nobody gid=nogroup home=$BASE/mail/%u
}
mail_location = maildir:~/Maildir
namespace inbox {
  inbox = yes
  mailbox Processed {
    auto = create
  }
}
pop3_uidl_format = %08Xu%08Xv
service imap-login {
  inet_listener imap {
    port = 10143
  }
  inet_listener imaps {
    port = 10993
    ssl = yes
  }
}
service pop3-login {
  inet_listener pop3 {
    port = 10110
  }
  inet_listener pop3s {
    port = 10995
    ssl = yes
  }
}
CONF
dovecot -c "$BASE/dovecot.conf"
trap 'dovecot -c "$BASE/dovecot.conf" stop 2>/dev/null || true' EXIT
echo "dovecot $(dovecot --version) on 127.0.0.1 (IMAP 10143/10993, POP3 10110/10995), log $BASE/dovecot.log"

export MAILROOM_HOME="$BASE/home"
unset MAILROOM_DATABASE_URL
MAILROOM_SECRET_KEY=$(cd "$ROOT" && "$PY" -c "from worker.core.crypto import generate_key; print(generate_key())")
export MAILROOM_SECRET_KEY
# An email as the worker leaves it after the relay took it, and the DSN for it as the relay sends it.
(cd "$ROOT" && "$PY" - "$UNKNOWN" "$BASE/dsn.eml" <<'PY'
import sys
from pathlib import Path
from tests.producers.bounces.corpus import load, readdress, sent_email
from worker.core.config import Settings
from worker.core.db import checked_url
from worker.core.return_path import bounce_key

settings = Settings.from_env()
email = sent_email(checked_url(settings), sys.argv[1])
Path(sys.argv[2]).write_bytes(
    readdress(load("postfix-unknown-user.eml"), email["id"], sys.argv[1], bounce_key(settings))
)
print(f"email {email['id']} to {sys.argv[1]} recorded sent; its DSN written to {sys.argv[2]}")
PY
)
printf 'From: someone@example.net\r\nSubject: buy now\r\n\r\nnothing to do with bounces\r\n' > "$BASE/junk.eml"
AUTH="--user bounces --password-file $BASE/password --cafile $BASE/cert.pem"

echo "== 1. IMAP STARTTLS, --move-to Processed"
drop "$BASE/dsn.eml" 1
mailroom bounces poll --imap 127.0.0.1:10143 --starttls $AUTH --move-to Processed --once
echo "exit $?; INBOX: $(maildir_count new) new, $(maildir_count cur) cur; Processed: $(maildir_count .Processed/cur) + $(maildir_count .Processed/new)"

echo "== 2. the same DSN again and junk, POP3 over TLS"
drop "$BASE/dsn.eml" 2
drop "$BASE/junk.eml" 3
mailroom bounces poll --pop3 127.0.0.1:10995 $AUTH
echo "exit $?; INBOX: $(maildir_count new) new, $(maildir_count cur) cur"

echo "== 3. a DSN while the database is down, IMAP over TLS"
drop "$BASE/dsn.eml" 4
status=0
MAILROOM_DATABASE_URL="postgresql://127.0.0.1:1/nothing?connect_timeout=2" \
    mailroom bounces poll --imap 127.0.0.1:10993 $AUTH || status=$?
echo "exit $status; INBOX: $(maildir_count new) new, $(maildir_count cur) cur"

echo "== 4. the database back, IMAP over TLS"
mailroom bounces poll --imap 127.0.0.1:10993 $AUTH
echo "exit $?; INBOX: $(maildir_count new) new, $(maildir_count cur) cur"

echo "== 5. a certificate nobody vouched for (no --cafile)"
status=0
mailroom bounces poll --imap 127.0.0.1:10993 --user bounces --password-file "$BASE/password" || status=$?
echo "exit $status"

echo "== the email, the bounce list and the quarantine"
(cd "$ROOT" && "$PY" - <<'PY'
import psycopg
from worker.core.config import Settings
from worker.core.db import checked_url

with psycopg.connect(checked_url(Settings.from_env())) as conn:
    for query in (
        "SELECT id, status, last_error FROM mailroom.email_queue",
        "SELECT email, bounce_type, bounce_count, enhanced_code FROM mailroom.bounce_list",
        "SELECT count(*) AS bounce_events FROM mailroom.bounce_events",
    ):
        print(conn.execute(query).fetchall())
PY
)
mailroom bounces quarantine
