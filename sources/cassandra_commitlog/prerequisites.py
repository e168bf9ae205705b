"""What the ``cassandra_commitlog`` source needs of its node, checked (``cdcflow doctor``, and the
cheap part at every start): CDC on for each table it names, the node's CDC on, a cdc_raw it can
read and clean, the node's own cdc_raw, and room left under ``cdc_total_space``.

A table with ``cdc = false`` never reaches cdc_raw (Cassandra links only segments holding CDC
tables' writes, and the source skips other tables' mutations): without this check a pipeline
naming it starts and delivers nothing, without a word.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.prerequisites import CheckResult
from cdcflow.sources.cassandra_commitlog.cdc_space import CdcSpaceSettings, cdc_raw_bytes
from cdcflow.sources.cassandra_commitlog.schema import SchemaCatalog, TableSchema

if TYPE_CHECKING:
    from cdcflow.sources.cassandra_commitlog.source import CassandraCommitLogSourceConfig

__all__ = ["check_cdc_raw", "check_node", "check_node_cdc", "check_tables", "reads_cdc_raw"]

# cdc_raw this full of cdc_total_space is worth a warning: the stream has fallen behind.
_USED_WARN_SHARE = 0.5


def _emitted_by_default(table: TableSchema) -> bool:
    return table.cdc and not table.keyspace.startswith("system")


def _counter(table: TableSchema) -> bool:
    return any(c.type_text == "counter" for c in table.columns.values())


def reads_cdc_raw(config: CassandraCommitLogSourceConfig) -> bool:
    """``snapshot: initial_only`` reads the tables themselves, never the commit log."""
    return config.snapshot != "initial_only"


def check_tables(config: CassandraCommitLogSourceConfig, catalog: SchemaCatalog) -> list[CheckResult]:
    """CDC on for each table in ``tables`` (or, without it, for at least one table)."""
    if config.tables is None:
        followed = [t for t in catalog.tables.values() if _emitted_by_default(t)]
        check = "a table with cdc = true (source.tables: every one)"
        if not followed:
            return [
                CheckResult.warn(
                    check,
                    "no table outside the system keyspaces has cdc = true: nothing is read until one has",
                    "ALTER TABLE <keyspace>.<table> WITH cdc = true, or name the tables in source.tables",
                )
            ]
        names = sorted(f"{t.keyspace}.{t.table}" for t in followed)
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        return [CheckResult.ok(check, f"{len(names)}: {shown}")]
    results = []
    for name in config.tables:
        keyspace, _, table_name = name.partition(".")
        table = catalog.by_name(keyspace, table_name)
        check = f"CDC on for {name}"
        if table is None:
            results.append(
                CheckResult.fail(
                    check,
                    "no such table in system_schema.tables",
                    f"create it WITH cdc = true, or correct source.tables ({name})",
                )
            )
        elif not reads_cdc_raw(config):
            results.append(CheckResult.ok(check, "not needed: snapshot: initial_only reads the table itself"))
        elif not table.cdc:
            results.append(
                CheckResult.fail(
                    check,
                    f"{name} has cdc = false in system_schema.tables: its changes never reach cdc_raw, so none "
                    "would be delivered",
                    f"ALTER TABLE {name} WITH cdc = true (changes made before are not in cdc_raw: "
                    "snapshot: initial reads them), or remove it from source.tables",
                )
            )
        elif _counter(table):
            results.append(
                CheckResult.fail(
                    check,
                    f"{name} has counter columns: their updates are deltas of a shard's count, not row states, "
                    "and the source skips them",
                    f"remove {name} from source.tables",
                )
            )
        else:
            results.append(CheckResult.ok(check, "cdc = true"))
    return results


def check_node_cdc(settings: CdcSpaceSettings | None) -> list[CheckResult]:
    check = "the node's cdc_enabled"
    if settings is None or settings.cdc_enabled is None:
        return [CheckResult.skip(check, "system_views.settings cannot be read (before Cassandra 4.1, or no access)")]
    if not settings.cdc_enabled:
        return [
            CheckResult.fail(
                check,
                "cdc_enabled: false: the node writes nothing to cdc_raw",
                "set cdc_enabled: true in cassandra.yaml and restart the node",
            )
        ]
    return [CheckResult.ok(check, "cdc_enabled: true")]


def check_cdc_raw(config: CassandraCommitLogSourceConfig) -> list[CheckResult]:
    """cdc_raw is a directory the source can read, and clean unless it keeps what it read."""
    path = config.cdc_raw
    check = "cdc_raw readable"
    if not path.is_dir():
        return [
            CheckResult.fail(
                check,
                f"{path}: " + ("not a directory" if path.exists() else "it does not exist"),
                "point source.cdc_raw at the node's cdc_raw_directory (cassandra.yaml), on the node itself",
            )
        ]
    if not os.access(path, os.R_OK | os.X_OK):
        return [
            CheckResult.fail(check, f"{path}: this process may not list or read it", "run cdcflow as a user that may")
        ]
    if config.processed_segments != "keep" and not os.access(path, os.W_OK):
        return [
            CheckResult.fail(
                check,
                f"{path}: this process may not delete from it: read segments would stay, cdc_raw would fill up and the "
                "node would refuse writes to CDC tables",
                "give the user write access to cdc_raw (Cassandra's group), or processed_segments: keep "
                "with something else cleaning it",
            )
        ]
    access = "readable" + ("" if config.processed_segments == "keep" else " and writable")
    return [CheckResult.ok(check, f"{path}: {access}")]


def _is_local_address(address: str) -> bool:
    """Whether this machine has ``address`` (binding to it succeeds only then)."""
    try:
        family = socket.getaddrinfo(address, None)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
        return True
    except OSError:
        return False


def check_node(
    config: CassandraCommitLogSourceConfig, settings: CdcSpaceSettings | None, node_address: str
) -> list[CheckResult]:
    """cdc_raw is the node's own (its address is this machine's, its cdc_raw_directory this
    one), and cdc_total_space has room: the thorough checks."""
    results = []
    check = f"cdc_raw on node {node_address}"
    if not _is_local_address(node_address):
        results.append(
            CheckResult.warn(
                check,
                f"{node_address} (source.node_address, else the first host) is not an address of this machine; "
                "cdc_raw is read from the local disk",
                "run the pipeline on the node whose cdc_raw it reads, with node_address its address",
            )
        )
    elif settings is None or settings.cdc_raw_directory is None:
        results.append(CheckResult.skip(check, "the node's cdc_raw_directory cannot be read (system_views.settings)"))
    elif Path(settings.cdc_raw_directory).resolve() != config.cdc_raw.resolve():
        results.append(
            CheckResult.warn(
                check,
                f"the node's cdc_raw_directory is {settings.cdc_raw_directory}, source.cdc_raw is {config.cdc_raw}",
                "fine if one is mounted at the other; else point source.cdc_raw at the node's",
            )
        )
    else:
        results.append(CheckResult.ok(check, f"the node's cdc_raw_directory is {settings.cdc_raw_directory}"))
    results += _check_space(config.cdc_raw, settings)
    return results


def _check_space(cdc_raw: Path, settings: CdcSpaceSettings | None) -> Sequence[CheckResult]:
    check = "cdc_raw's room under cdc_total_space"
    total = settings.cdc_total_space if settings is not None else None
    if total is None or not cdc_raw.is_dir():
        return [CheckResult.skip(check, "cdc_total_space cannot be read (system_views.settings), or no cdc_raw")]
    assert settings is not None
    used = cdc_raw_bytes(cdc_raw)
    found = f"cdc_raw holds {used >> 20} MiB of cdc_total_space {total >> 20} MiB ({100 * used / total:.0f}%)"
    when_full = (
        "the node deletes the oldest unread segments (cdc_block_writes: false): changes are lost"
        if settings.cdc_block_writes is False
        else "the node refuses writes to CDC tables"
    )
    results = []
    if used >= total:
        results.append(
            CheckResult.fail(
                check, f"{found}: full, {when_full}", "let the pipeline catch up, or raise cdc_total_space"
            )
        )
    elif used >= total * _USED_WARN_SHARE:
        results.append(
            CheckResult.warn(
                check, f"{found}; when full, {when_full}", "let the pipeline catch up (it deletes what it read)"
            )
        )
    else:
        results.append(CheckResult.ok(check, found))
    free = shutil.disk_usage(cdc_raw).free
    if used + free < total:
        results.append(
            CheckResult.warn(
                "the disk under cdc_raw holds cdc_total_space",
                f"{free >> 20} MiB free: the disk fills before cdc_raw reaches cdc_total_space {total >> 20} MiB",
                "free space on the disk, or lower cdc_total_space",
            )
        )
    if settings.cdc_block_writes is False:
        results.append(
            CheckResult.warn(
                "cdc_block_writes",
                "false: when cdc_raw is full the node deletes unread segments, and their changes are lost to the "
                "pipeline",
                "set cdc_block_writes: true (the default) to refuse writes instead of losing changes",
            )
        )
    return results
