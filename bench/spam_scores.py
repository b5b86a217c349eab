"""SpamAssassin's local-rules score (`spamassassin -t -L`) of campaign and built-in template email as
Mailroom builds it: a realistic newsletter and a short one, with and without the open pixel.

Run: python bench/spam_scores.py   (needs Debian's spamassassin: apt-get install -y spamassassin)
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tracking.campaign_mail_helpers import newsletter, sent_bytes
from tests.tracking.spam_helpers import score
from worker.core.config import Settings
from worker.core.outbox import COLUMNS, EmailRequest, prepare

SETTINGS = Settings(base_url="https://t.example.org", postal_address="Oak & Iron Ltd, 12 Mill Lane, Bristol")
SHORT_TEXT = "Hello,\n\nOur sale starts on Monday.\n"
SHORT_HTML = "<p>Hello,</p><p>Our sale starts on Monday.</p>"


def _row(request: EmailRequest) -> dict[str, object]:
    """The row enqueue would store (without a database: no template, no campaign settings)."""
    row = dict(zip(COLUMNS, prepare(request, None, SETTINGS), strict=False))
    row["headers"] = json.loads(str(row["headers"]))
    row.update(id=1, created_at=datetime.now(UTC))
    return row


def main() -> None:
    """Print one line per case: its score and the rules that fired."""
    text, html = newsletter()
    cases = {
        "newsletter (~700 words), pixel and links": EmailRequest(
            to="r@example.net", subject="Spring at the workshop", text=text, html=html, campaign_id="spring"
        ),
        "short campaign, pixel and links": EmailRequest(
            to="r@example.net", subject="Sale", text=SHORT_TEXT, html=SHORT_HTML, campaign_id="spring"
        ),
        "short campaign, no tracking": EmailRequest(
            to="r@example.net",
            subject="Sale",
            text=SHORT_TEXT,
            html=SHORT_HTML,
            campaign_id="spring",
            track=False,
        ),
    }
    for name, request in cases.items():
        points, rules = score(sent_bytes(_row(request), SETTINGS))
        print(f"{points:5.1f}  {name}: {rules.split('autolearn')[0]}")


if __name__ == "__main__":
    main()
