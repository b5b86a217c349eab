"""Development tools: the local SMTP sink and the demo."""
