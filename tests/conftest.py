"""The suite's fixture plugins, loaded here rather than by `-p` in addopts so that `-p no:tests.fixtures_db`
really leaves them out: the unit tier runs that way, and any test of it that asks for a database fails."""

pytest_plugins = [
    "tests.fixtures_db",
    "tests.fixtures_smtp",
    "tests.fixtures_keys",
    "tests.fixtures_failover",
]
