"""The kafka sink's settings that cannot go together are refused when the pipeline is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigFieldError
from cdcflow.plugins import PluginRegistry


def _pipeline(tmp_path: Path, sink_fields: str) -> Path:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\nsource: {type: datagen, count: 1}\n"
        f"sink: {{type: kafka, bootstrap_servers: '127.0.0.1:9092', {sink_fields}}}\n"
    )
    return file


def test_tombstones_on_delete_refuses_a_producer_that_reports_failures_only(tmp_path: Path) -> None:
    # A tombstone waits for its delete's success report: without such reports it would never be written.
    registry = PluginRegistry.from_entry_points()
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(_pipeline(tmp_path, "producer: {delivery.report.only.error: true}"), registry)
    assert "line 3: field sink: producer.delivery.report.only.error cannot be true" in str(caught.value)
    assert "tombstones_on_delete" in str(caught.value)
    fields = "tombstones_on_delete: false, producer: {delivery.report.only.error: true}"
    assert load_pipeline(_pipeline(tmp_path, fields), registry).sink.config.producer == {
        "delivery.report.only.error": True
    }
