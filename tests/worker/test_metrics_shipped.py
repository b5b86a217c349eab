"""The alert rules and the dashboard shipped in deploy/: valid for promtool, and about metrics Mailroom exports."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.worker.helpers import add_sender
from tests.worker.metrics_helpers import family_names, get, promtool
from worker.core import metrics
from worker.core.config import Settings
from worker.ops.metrics import GAUGE_NAMES
from worker.ops.metrics_server import WORKER, serve_here

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "mailroom-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "mailroom-rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "mailroom-dashboard.json"
_NAME = re.compile(r"\bmailroom_[a-z_]+\b")
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def _exported() -> set[str]:
    """Every series name the code says it exports."""
    names = set(GAUGE_NAMES) | set(metrics.PROCESS_GAUGE_NAMES) | {"mailroom_exporter_info"}
    names |= {f"{name}_total" for name in metrics.COUNTER_NAMES}
    names |= {name + suffix for name in metrics.HISTOGRAM_NAMES for suffix in _HISTOGRAM_SERIES}
    return names


def _rule_queries() -> Iterator[str]:
    for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            yield str(rule["expr"])


def _dashboard_queries() -> Iterator[str]:
    for panel in json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]:
        for target in panel["targets"]:
            yield str(target["expr"])


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_queries_name_only_metrics_the_code_exports(source: str) -> None:
    queries = list(_rule_queries() if source == "rules" else _dashboard_queries())
    used = {name for query in queries for name in _NAME.findall(query)}
    assert used, source
    assert used <= _exported(), sorted(used - _exported())


def test_every_alert_the_rules_test_covers_is_a_rule_and_every_rule_is_tested() -> None:
    rules = {
        r["alert"] for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for r in g["rules"]
    }
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
        for case in test.get("alert_rule_test", [])
    }
    assert tested == rules


def test_a_scrape_shows_every_family_the_code_declares(db_url: str, settings: Settings) -> None:
    add_sender(db_url, 2525)  # a sender, so its families have samples (nothing is sent)
    server = serve_here("127.0.0.1", 0, db_url, settings, WORKER)
    try:
        status, _, text = get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
        metrics.disable()
    assert status == 200
    declared = set(GAUGE_NAMES) | set(metrics.PROCESS_GAUGE_NAMES) | {"mailroom_exporter_info"}
    declared |= {f"{name}_total" for name in metrics.COUNTER_NAMES} | set(metrics.HISTOGRAM_NAMES)
    assert declared <= family_names(text), sorted(declared - family_names(text))
