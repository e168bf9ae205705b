"""The ``datagen`` source: deterministic synthetic change events for tests and benchmarks."""

from cdcflow.sources.datagen.source import DatagenConfig, DatagenSource, expected_event_ids

__all__ = ["DatagenConfig", "DatagenSource", "expected_event_ids"]
