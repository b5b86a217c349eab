"""Enqueue N emails with django-post-office's bulk API (`mail.send_many`, bulk_create underneath).

python -m bench.peers_django.enqueue N        (in the peers' virtualenv, DJANGO_SETTINGS_MODULE set)
"""

from __future__ import annotations

import sys

import django

CHUNK = 1000


def main() -> None:
    """Queue N emails in chunks of 1000, each chunk one bulk insert."""
    django.setup()
    from post_office import mail  # after setup: post-office's models need the app registry

    n = int(sys.argv[1])
    for start in range(0, n, CHUNK):
        mail.send_many(
            [
                {
                    "sender": "bench@example.org",
                    "recipients": [f"user{i}@example.com"],
                    "subject": f"Benchmark message {i}",
                    "message": "Hello from the benchmark.\n",
                }
                for i in range(start, min(n, start + CHUNK))
            ]
        )


if __name__ == "__main__":
    main()
