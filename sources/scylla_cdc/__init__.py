"""The ScyllaDB CDC source: generation- and stream-aware reading of CDC log tables.

``ScyllaCdcSource`` reads ScyllaDB's CDC log tables. Tests write those tables with the ScyllaDB
stand-in (``tests/standins/scylla``), which is test machinery and not part of this package.
"""

from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig

__all__ = ["ScyllaCdcSource", "ScyllaCdcSourceConfig"]
