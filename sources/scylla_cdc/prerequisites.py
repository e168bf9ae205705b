"""What the ``scylla_cdc`` source needs of the cluster, checked (``cdcflow doctor``, and the cheap
part at every start): each table's CDC on, in a delta mode its events can carry rows in, with the
log TTL the source assumes; the CDC metadata readable at the consistency ScyllaDB writes it at; and
each log table readable at the pipeline's ``consistency``.

A table whose CDC was turned off (``cdc = {'enabled': false}``) logs no more writes: without this
check a pipeline naming it runs and delivers nothing new, without a word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcflow.errors import CdcflowError
from cdcflow.prerequisites import CheckResult
from cdcflow.sources.scylla_cdc.connection import connect_as_configured, token_owner_count
from cdcflow.sources.scylla_cdc.exceptions import CdcOptionsError
from cdcflow.sources.scylla_cdc.log_reader import LOG_SUFFIX
from cdcflow.sources.scylla_cdc.metadata import GenerationReader, MetadataQueries, TabletStreamReader
from cdcflow.sources.scylla_cdc.table_options import CdcOptions, SchemaTablesLookup

if TYPE_CHECKING:
    from cdcflow.sources.scylla_cdc.source import ScyllaCdcSourceConfig

__all__ = ["check_cdc_options", "check_cluster", "check_log_reads", "check_metadata"]


def check_cluster(config: ScyllaCdcSourceConfig, timeout_s: float) -> list[CheckResult]:
    """Every check, on a connection of its own (``cdcflow doctor``)."""
    connection = connect_as_configured(config, timeout_s)
    try:
        session, metadata_profile = connection.session, connection.metadata_profile
        lookup = SchemaTablesLookup(session, config.schema_keyspace, metadata_profile)
        options: dict[str, CdcOptions | None] = {}
        log_tables: dict[str, bool] = {}
        unreadable = []
        for name in config.tables:
            keyspace, table = _split(name)
            rows = session.execute(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s",
                (keyspace, table + LOG_SUFFIX),
                execution_profile=metadata_profile,
            )
            log_tables[name] = bool(list(rows))
            try:
                options[name] = lookup.cdc_options(keyspace, table)
            except CdcOptionsError as exc:
                unreadable.append(
                    CheckResult.fail(f"CDC on for {name}", str(exc), "ALTER TABLE ... WITH cdc = {...} again")
                )
        queries = MetadataQueries(session, metadata_profile, lambda: token_owner_count(connection.cluster))
        logged = [name for name in config.tables if log_tables[name]]
        return [
            *unreadable,
            *check_cdc_options(config, [n for n in config.tables if n in options], options, log_tables),
            *check_metadata(config, queries),
            *check_log_reads(logged, config.consistency, session, connection.log_profile),
        ]
    finally:
        connection.cluster.shutdown()


def check_cdc_options(
    config: ScyllaCdcSourceConfig,
    tables: Sequence[str],
    options: Mapping[str, CdcOptions | None],
    log_tables: Mapping[str, bool],
) -> list[CheckResult]:
    """Per table of ``tables``: CDC enabled, a delta mode whose events carry rows, and the TTL.
    ``options``: each table's cdc schema extension (None: it has none); ``log_tables``: whether its
    log table exists."""
    results = []
    for name in tables:
        table_options = options.get(name)
        check = f"CDC on for {name}"
        if table_options is None:
            if not log_tables.get(name, False):
                results.append(
                    CheckResult.fail(
                        check,
                        f"no cdc schema extension in {config.schema_keyspace}.tables and no log table "
                        f"{name}{LOG_SUFFIX}: CDC is off",
                        f"ALTER TABLE {name} WITH cdc = {{'enabled': true}}",
                    )
                )
            else:
                results.append(
                    CheckResult.warn(
                        check,
                        f"its log table exists, but {config.schema_keyspace}.tables has no cdc extension for it "
                        "(a server before ScyllaDB 4.0?): its options and log TTL are unknown",
                        "set schema_keyspace where the options are, or log_ttl_s to the table's cdc ttl",
                    )
                )
            continue
        if not table_options.enabled:
            results.append(
                CheckResult.fail(
                    check,
                    f"cdc = {{'enabled': false}}: ScyllaDB logs none of {name}'s writes, so none would be delivered",
                    f"ALTER TABLE {name} WITH cdc = {{'enabled': true}} (writes made meanwhile are not in the log: "
                    "snapshot: initial reads them), or remove it from source.tables",
                )
            )
            continue
        results.append(CheckResult.ok(check, "enabled"))
        results.append(_check_delta_mode(name, table_options))
        results.append(_check_ttl(config, name, table_options))
    return results


def _check_delta_mode(name: str, options: CdcOptions) -> CheckResult:
    check = f"delta mode of {name}"
    if options.delta == "keys" and not options.postimage:
        return CheckResult.fail(
            check,
            "'delta': 'keys' without post-images: its log says which key changed, not how",
            f"ALTER TABLE {name} WITH cdc = {{'enabled': true, 'delta': 'full'}} (or 'postimage': true)",
        )
    if options.delta == "keys":
        return CheckResult.ok(check, "'delta': 'keys' with post-images: events carry the post-image as the row")
    images = ", ".join(
        part for part, on in (("pre-images", bool(options.preimage)), ("post-images", options.postimage)) if on
    )
    return CheckResult.ok(check, "'delta': 'full'" + (f", with {images}" if images else ""))


def _check_ttl(config: ScyllaCdcSourceConfig, name: str, options: CdcOptions) -> CheckResult:
    check = f"log TTL of {name}"
    table_ttl = f"{options.ttl_s} s" if options.ttl_s else "0 (rows never expire)"
    if config.log_ttl_s is not None and config.log_ttl_s != options.ttl_s:
        return CheckResult.warn(
            check,
            f"source.log_ttl_s is {config.log_ttl_s} s, the table's cdc ttl is {table_ttl}: the source would "
            "misjudge which rows have expired",
            "remove source.log_ttl_s (the table's option is read), or set it to the table's ttl",
        )
    if not options.ttl_s:
        return CheckResult.ok(check, f"{table_ttl}: the log keeps every row until deleted")
    return CheckResult.ok(check, f"{table_ttl}: a partition further behind than that loses changes")


def check_metadata(config: ScyllaCdcSourceConfig, queries: MetadataQueries) -> list[CheckResult]:
    """The generations (vnode keyspaces) or stream sets (tablet keyspaces) read as the source reads
    them: ``system_distributed`` at QUORUM when several nodes own tokens (ONE on a single node),
    node-local tables at ONE."""
    check = f"CDC metadata readable ({config.generations_keyspace}, {config.tablets_keyspace})"
    level = "QUORUM" if queries.token_owners() > 1 else "ONE (a single node owns tokens)"
    tablets = TabletStreamReader(queries, config.tablets_keyspace)
    generations = GenerationReader(queries, config.generations_keyspace, config.tablets_keyspace)
    try:
        tablet_tables = [name for name in config.tables if tablets.newest_timestamp(*_split(name)) is not None]
        found = []
        if len(tablet_tables) < len(config.tables):
            layout = generations.detect_layout()
            if layout is None:
                return [
                    CheckResult.fail(
                        check,
                        f"no CDC description tables in {config.generations_keyspace} (cdc_generation_timestamps, "
                        "cdc_streams_descriptions_v2)",
                        "point generations_keyspace at the keyspace that holds them (system_distributed)",
                    )
                ]
            listed = generations.generations()
            found.append(f"{len(listed)} generation(s) ({layout} layout) at {level}")
        if tablet_tables:
            found.append(f"tablet stream sets of {', '.join(tablet_tables)}")
    except CdcflowError as exc:
        return [
            CheckResult.fail(
                check,
                str(exc),
                "make the metadata's replicas reachable (system_distributed has RF 3: QUORUM needs two of them "
                "once several nodes own tokens)",
            )
        ]
    return [CheckResult.ok(check, "; ".join(found))]


def check_log_reads(tables: Sequence[str], consistency: str, session: Any, profile: object) -> list[CheckResult]:
    """One row of each table's log read at ``consistency`` (in ``profile``), as log queries are."""
    results = []
    for name in tables:
        check = f"{name}{LOG_SUFFIX} readable at {consistency}"
        try:
            session.execute(f'SELECT "cdc$stream_id" FROM {name}{LOG_SUFFIX} LIMIT 1', execution_profile=profile)
        except Exception as exc:  # the driver's Unavailable, ReadTimeout, InvalidRequest...
            results.append(
                CheckResult.fail(
                    check,
                    f"{type(exc).__name__}: {exc}",
                    "lower source.consistency (LOCAL_QUORUM, ONE) or bring the log's replicas up",
                )
            )
            continue
        results.append(CheckResult.ok(check, "a log query was answered"))
    return results


def _split(name: str) -> tuple[str, str]:
    keyspace, _, table = name.partition(".")
    return keyspace, table
