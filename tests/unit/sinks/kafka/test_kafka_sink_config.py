"""The kafka sink's producer settings as the pipeline file gives them."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.config import load_pipeline
from cdcflow.plugins import PluginRegistry


def _pipeline(tmp_path: Path, sink_fields: str) -> Path:
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: p\nsource: {type: datagen, count: 1}\n"
        f"sink: {{type: kafka, bootstrap_servers: '127.0.0.1:9092', {sink_fields}}}\n"
    )
    return file


@pytest.mark.parametrize("tombstones", ["true", "false"])
def test_a_producer_that_reports_failures_only_goes_with_tombstones_on_or_off(tmp_path: Path, tombstones: str) -> None:
    # Tombstones wait for a flush of the producer, after which no failure report means the delete was taken:
    # they need no success reports, so the setting that silences them is the user's to choose.
    registry = PluginRegistry.from_entry_points()
    fields = f"tombstones_on_delete: {tombstones}, producer: {{delivery.report.only.error: true}}"
    sink = load_pipeline(_pipeline(tmp_path, fields), registry).sink
    assert sink.config.tombstones_on_delete is (tombstones == "true")
    assert sink.config.producer == {"delivery.report.only.error": True}
