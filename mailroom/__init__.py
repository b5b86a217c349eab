"""Mailroom's public Python API (being written: see the issue "A face for the people who build on Mailroom")."""
