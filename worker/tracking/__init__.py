"""Tracking: the open/click/unsubscribe HTTP server and campaign figures."""
