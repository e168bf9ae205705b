"""A stand-in TiKV cluster for tests: PD, RawKV and ChangeData over real gRPC, on cdcflow's protos.

Real TiKV cannot run on the machines cdcflow is built on. This server implements, and only
implements, the subset of PD, TiKV RawKV (API V2) and the ChangeData feed that cdcflow speaks,
with their documented behaviour: MVCC versions stamped by its own TSO, regions with epochs and
leaders that tests split, merge and move, region errors, resolved-ts, GC safepoints. A control
service (JSON over gRPC, not part of any TiKV protocol) lets tests drive it.

Run: ``python -m tests.standins.tikv --stores 3``; it prints one JSON line with its ports.
"""
