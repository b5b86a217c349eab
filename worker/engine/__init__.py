"""The delivery engine: claims and leases, sender accounts, the SMTP session, recording, supervision."""
