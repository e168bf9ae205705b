"""A stand-in for ScyllaDB's CDC, for tests: what a ScyllaDB cluster writes, into a real Cassandra node.

ScyllaDB cannot run on the machines cdcflow is built on. :class:`ScyllaCdcWriter` (``writer``)
writes ScyllaDB's CDC metadata tables, log tables and log rows as ScyllaDB's own code does
(``split`` models ``cdc/split.cc`` and ``cdc/log.cc``), so the ``scylla_cdc`` source is tested
against the server's behaviour, not against its own assumptions. Test machinery: the product
neither ships nor imports it.
"""

from tests.standins.scylla.writer import ScyllaCdcWriter, SimulatedKeyspaces

__all__ = ["ScyllaCdcWriter", "SimulatedKeyspaces"]
