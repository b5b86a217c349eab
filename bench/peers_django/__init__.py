"""django-post-office for bench.peers: settings and the enqueue step, run by the peers' own virtualenv."""
