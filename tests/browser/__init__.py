"""Browser tests: Mailroom's public pages driven in Debian's chromium through Playwright."""
