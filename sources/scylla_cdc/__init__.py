"""The ScyllaDB CDC source: generation- and stream-aware reading of CDC log tables.

``ScyllaCdcSource`` reads ScyllaDB's CDC log tables; ``ScyllaCdcWriter`` (in ``simulator``) writes
what ScyllaDB's CDC writes into any CQL cluster, to test consumers without a ScyllaDB cluster.
"""

from cdcflow.sources.scylla_cdc.simulator import ScyllaCdcWriter, SimulatedKeyspaces
from cdcflow.sources.scylla_cdc.source import ScyllaCdcSource, ScyllaCdcSourceConfig

__all__ = ["ScyllaCdcSource", "ScyllaCdcSourceConfig", "ScyllaCdcWriter", "SimulatedKeyspaces"]
