"""The shipped Prometheus alert rules and Grafana dashboard (``config/prometheus``, ``config/grafana``,
issue 27 item 2) ask only for metrics cdcflow serves: every query is parsed as PromQL, and the
metrics it names are looked up in what a running pipeline's metrics port serves."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "config" / "prometheus" / "cdcflow-alerts.yaml"
DASHBOARD = REPO / "config" / "grafana" / "cdcflow-dashboard.json"
HEADROOM = "cdcflow_data_loss_headroom_seconds"
# Grafana's own variables, which Prometheus never sees: a range for $__rate_interval, a regex for ours.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$pipeline": ".*"}


@pytest.fixture(scope="module")
def served_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """The sample names a running pipeline's metrics port serves (each family's, whether or not it
    has samples yet: a counter ``x`` is served as ``x_total`` and ``x_created``)."""
    folder = tmp_path_factory.mktemp("metrics")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    file = folder / "datagen.yaml"
    file.write_text(
        "name: metrics-scrape\nsource: {type: datagen, rate: 100, partitions: 2}\n"
        "sink: {type: file, path: out.jsonl}\ncheckpoint: {type: file, path: ckpt, fsync: false}\n"
        f"engine: {{metrics_port: {port}}}\n"
    )
    running = subprocess.Popen(
        [sys.executable, "-m", "cdcflow.cli", "run", str(file)], cwd=folder, stderr=subprocess.PIPE, text=True
    )
    try:
        text = _scrape(f"http://127.0.0.1:{port}/metrics", running)
    finally:
        running.terminate()
        running.communicate(timeout=60)
    served = set()
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE):
        name, kind = kind_line
        if kind == "counter":
            base = name.removesuffix("_total")
            served |= {f"{base}_total", f"{base}_created"}
        elif kind in ("histogram", "summary"):
            served |= {name, f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
        else:
            served.add(name)
    yield served


def _scrape(url: str, running: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return str(answer.read().decode())
        except OSError:
            assert running.poll() is None, f"the pipeline exited: {running.communicate()[1]}"
            assert time.monotonic() < deadline, "no metrics port within 60 s"
            time.sleep(0.2)


def _metrics_named(expr: str) -> list[str]:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.append(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)  # a ValueError names a query that does not parse
    return names


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":  # label_values(metric, label): Grafana's, its metric Prometheus's
            (metric,) = re.findall(r"label_values\((\w+),", variable["definition"])
            queries.append(metric)
    return queries


def test_every_alert_rule_asks_for_served_metrics(served_metrics: set[str]) -> None:
    assert HEADROOM in served_metrics  # registered whether or not a source has measured one yet
    named = set()
    for rule in _rules():
        assert rule["alert"].startswith("Cdcflow") and rule["labels"]["severity"] in ("warning", "critical"), rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
        metrics = _metrics_named(rule["expr"])
        assert metrics and set(metrics) <= served_metrics, (rule["alert"], sorted(set(metrics) - served_metrics))
        named |= set(metrics)
    assert HEADROOM in named


def test_every_dashboard_query_asks_for_served_metrics(served_metrics: set[str]) -> None:
    named = set()
    for query in _dashboard_queries():
        metrics = _metrics_named(query)
        assert metrics and set(metrics) <= served_metrics, (query, sorted(set(metrics) - served_metrics))
        named |= set(metrics)
    assert HEADROOM in named
