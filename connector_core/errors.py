"""Every way cdcflow can fail, in one tree.

Callers catch a family (``SinkError``) or a leaf (``SinkUnavailableError``). Errors that a retry
can cure derive from :class:`TransientError` as well, so the delivery loop decides what to retry
by type, never by parsing messages. No error's text shows a secret a pipeline file brought in
(:mod:`cdcflow.redaction`).

::

    CdcflowError
    ├── ConfigError
    │   ├── ConfigFileError            unreadable file or YAML
    │   └── ConfigFieldError           one or more bad fields (file, dotted path, expected, found)
    │       ├── MissingEnvironmentVariableError
    │       ├── MalformedEnvironmentReferenceError  looks like ${NAME} but is not
    │       └── SecretFileError        ${file:PATH[:KEY]}: the file cannot be read or parsed
    │           └── MissingSecretKeyError  the file has no such key
    ├── RestTlsError                   the REST control plane's certificate or key cannot be used
    ├── PluginError
    │   ├── UnknownPluginTypeError
    │   ├── PluginConflictError        two packages claim one type name
    │   ├── PluginLoadError
    │   └── MissingExtraError          the plugin or engine needs an optional dependency group not installed
    ├── SourceError
    │   ├── SourceUnavailableError     (transient)
    │   └── SourceDataError            an input the source cannot decode
    ├── TransformError
    ├── SinkError
    │   ├── SinkUnavailableError       (transient)
    │   ├── SinkDeliveryError          (transient) a flush could not make everything durable
    │   ├── RecordRejectedError        the sink refuses one record for good
    │   ├── TransactionFencedError     another process took over the transaction a sink wrote into
    │   └── DeadLetterRefusedError     the dead-letter destination refused records (nowhere else to go)
    ├── ConverterError
    │   └── SchemaRegistryError
    │       ├── IncompatibleSchemaError    the registry refused a schema (409): its records go to the dead letters
    │       └── SchemaRegistryUnavailableError (transient) unreachable, overloaded, or refusing our credentials
    ├── CheckpointError
    │   ├── CheckpointUnavailableError (transient)
    │   └── CheckpointCorruptError
    ├── ProtocolError                  a peer answered outside its protocol
    ├── StartupCheckError              a system did not answer at start (names the setting and address)
    │   └── PrerequisiteFailedError    a plugin's prerequisite is not met (CDC off on a table...): `cdcflow doctor`
    ├── EngineError
    │   ├── EngineUnavailableError     the engine cannot start here (no pyspark, no or old Java)
    │   ├── EngineUnsupportedError     this pipeline cannot run on this engine
    │   └── GroupUnavailableError      (transient) a worker group's Kafka cannot be reached
    ├── OffsetsChangeError             `cdcflow offsets reset|set` cannot be done
    │   ├── PipelineRunningError       the pipeline runs: stop or pause it first
    │   └── UnknownPartitionError      the source has no such partition
    ├── SnapshotRequestError           `cdcflow snapshot` / POST .../snapshots cannot be taken as asked
    │   ├── SnapshotUnsupportedError   the source has no live snapshots (or not for this partition)
    │   ├── SnapshotTableError         the source does not follow that table
    │   └── SnapshotWhereError         the --where condition is refused (by cdcflow or the database)
    └── RetriesExhaustedError          a transient failure outlived the retry budget
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdcflow.redaction import redact

__all__ = [
    "CdcflowError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointUnavailableError",
    "ConfigError",
    "ConfigFieldError",
    "ConfigFileError",
    "ConverterError",
    "DeadLetterRefusedError",
    "EngineError",
    "EngineUnavailableError",
    "EngineUnsupportedError",
    "FieldProblem",
    "GroupUnavailableError",
    "IncompatibleSchemaError",
    "MalformedEnvironmentReferenceError",
    "MissingEnvironmentVariableError",
    "MissingExtraError",
    "MissingSecretKeyError",
    "OffsetsChangeError",
    "PipelineRunningError",
    "PluginConflictError",
    "PluginError",
    "PluginLoadError",
    "PrerequisiteFailedError",
    "ProtocolError",
    "RecordRejectedError",
    "RestTlsError",
    "RetriesExhaustedError",
    "SchemaRegistryError",
    "SchemaRegistryUnavailableError",
    "SecretFileError",
    "SinkDeliveryError",
    "SinkError",
    "SinkUnavailableError",
    "SnapshotRequestError",
    "SnapshotTableError",
    "SnapshotUnsupportedError",
    "SnapshotWhereError",
    "SourceDataError",
    "SourceError",
    "SourceUnavailableError",
    "StartupCheckError",
    "TransactionFencedError",
    "TransformError",
    "TransientError",
    "UnknownPartitionError",
    "UnknownPluginTypeError",
    "closest_name",
]


class CdcflowError(Exception):
    """Root of every error cdcflow raises on purpose."""

    def __str__(self) -> str:
        # Wherever an error is shown (the CLI, a log line, a REST answer), secrets are not.
        return redact(super().__str__())


class TransientError(CdcflowError):
    """A failure that may pass: the operation is retried with backoff."""


# --- configuration -------------------------------------------------------------------------


class ConfigError(CdcflowError):
    """A pipeline file cannot be turned into a runnable pipeline."""


class ConfigFileError(ConfigError):
    """The file cannot be read or is not valid YAML."""

    def __init__(self, file: Path | str, reason: str, line: int | None = None) -> None:
        self.file = str(file)
        self.line = line
        where = f"{self.file}: line {line}" if line is not None else self.file
        super().__init__(f"{where}: {reason}")


def closest_name(found: object, known: Iterable[str]) -> str | None:
    """The known name ``found`` most likely misspells ("did you mean"), or None when none is close."""
    if not isinstance(found, str):
        return None
    matches = difflib.get_close_matches(found, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None


@dataclass(frozen=True)
class FieldProblem:
    """One bad field: where it is, what was expected there and what was found, or, for a check
    that explains itself (a regular expression that does not compile), its ``reason`` instead of
    the expectation. ``suggestion`` is a known name close to the one found ("did you mean")."""

    path: str
    expected: str
    found: str
    line: int | None = None
    suggestion: str | None = None
    reason: str | None = None

    @classmethod
    def because(cls, path: str, reason: str, found: str = "", line: int | None = None) -> FieldProblem:
        """A problem a check explains in its own words; ``found`` empty when the value is a whole
        section the file shows anyway."""
        return cls(path, "", found, line, reason=reason)

    def describe(self, file: str) -> str:
        where = f"{file}: line {self.line}" if self.line is not None else file
        if self.reason is not None:
            what = self.reason + (f" (found {self.found})" if self.found else "")
        else:
            what = f"expected {self.expected}, found {self.found}"
        if self.suggestion is not None:
            what += f"; did you mean {self.suggestion}?"
        return f"{where}: field {self.path or '<root>'}: {what}"


class ConfigFieldError(ConfigError):
    """One or more fields of a pipeline file are wrong."""

    def __init__(self, file: Path | str, problems: Sequence[FieldProblem]) -> None:
        self.file = str(file)
        self.problems = list(problems)
        super().__init__("\n".join(p.describe(self.file) for p in self.problems))


class MissingEnvironmentVariableError(ConfigFieldError):
    """``${NAME}`` names a variable that is not set and has no ``:-default``."""

    def __init__(self, file: Path | str, path: str, variable: str, line: int | None = None) -> None:
        self.path, self.variable = path, variable
        reason = f"environment variable {variable} is not set (set it, or write ${{{variable}:-default}})"
        super().__init__(file, [FieldProblem.because(path, reason, line=line)])


class MalformedEnvironmentReferenceError(ConfigFieldError):
    """Text that looks like an environment reference but is neither ``${NAME}`` nor
    ``${NAME:-default}`` (``$NAME``, ``${A B}``, ``${NAME:default}``, an unclosed ``${``)."""

    def __init__(self, file: Path | str, path: str, reference: str, line: int | None = None) -> None:
        self.path, self.reference = path, reference
        reason = (
            f"{reference!r} is not an environment reference cdcflow reads: write "
            "${NAME} or ${NAME:-default} (NAME: letters, digits and _, not starting with a digit), "
            "${file:PATH} or ${file:PATH:KEY} for a secret file, or $$ for a literal $"
        )
        super().__init__(file, [FieldProblem.because(path, reason, line=line)])


class SecretFileError(ConfigFieldError):
    """``${file:PATH}`` or ``${file:PATH:KEY}`` names a file that cannot be read, or that is not
    the properties or JSON file a key is looked up in. The message names the file, never its content."""

    def __init__(self, file: Path | str, path: str, reason: str, line: int | None = None) -> None:
        self.path = path
        super().__init__(file, [FieldProblem.because(path, f"secret file reference: {reason}", line=line)])


class MissingSecretKeyError(SecretFileError):
    """``${file:PATH:KEY}``: the file has no such key."""

    def __init__(
        self, file: Path | str, path: str, secret_file: str, key: str, known: Sequence[str], line: int | None = None
    ) -> None:
        self.secret_file, self.key, self.known = secret_file, key, list(known)
        suggestion = closest_name(key, self.known)
        hint = f"; did you mean {suggestion!r}?" if suggestion is not None else ""
        keys = ", ".join(self.known) or "none"
        super().__init__(file, path, f"{secret_file} has no key {key!r} (its keys: {keys}){hint}", line)


# --- plugins -------------------------------------------------------------------------------


class PluginError(CdcflowError):
    """The plugin registry cannot provide what a pipeline asks for."""


class UnknownPluginTypeError(PluginError):
    def __init__(self, kind: str, type_name: str, known: Sequence[str]) -> None:
        self.kind, self.type_name, self.known = kind, type_name, list(known)
        self.suggestion = closest_name(type_name, self.known)
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion is not None else ""
        super().__init__(
            f"unknown {kind} type {type_name!r}; installed {kind} types: {', '.join(sorted(known)) or 'none'}{hint}"
        )


class PluginConflictError(PluginError):
    def __init__(self, kind: str, type_name: str, first: str, second: str) -> None:
        self.kind, self.type_name, self.first, self.second = kind, type_name, first, second
        super().__init__(
            f"{kind} type {type_name!r} is registered by two plugins: {first} and {second}; uninstall one of them"
        )


class PluginLoadError(PluginError):
    def __init__(self, plugin: str, cause: BaseException) -> None:
        self.plugin = plugin
        super().__init__(f"plugin {plugin} failed to load: {type(cause).__name__}: {cause}")


class MissingExtraError(PluginError):
    """What a pipeline names (``source cassandra_commitlog``, ``engine spark``) needs an optional
    dependency group (``cdcflow[cassandra]``) that is not installed."""

    def __init__(self, needed_by: str, requirement: str, missing_module: str) -> None:
        self.needed_by, self.requirement, self.missing_module = needed_by, requirement, missing_module
        super().__init__(
            f"{needed_by} needs {requirement}: pip install '{requirement}' (missing module {missing_module})"
        )


# --- data path -----------------------------------------------------------------------------


class SourceError(CdcflowError):
    """A source failed to describe or read its partitions."""


class SourceUnavailableError(SourceError, TransientError):
    """The source system cannot be reached right now."""


class SourceDataError(SourceError):
    """The source read bytes or rows it cannot decode."""


class TransformError(CdcflowError):
    """A transform failed on one record."""


class SinkError(CdcflowError):
    """A sink failed to accept or persist records."""


class SinkUnavailableError(SinkError, TransientError):
    """The destination cannot be reached right now."""


class SinkDeliveryError(SinkError, TransientError):
    """A flush could not confirm every record; nothing past the last checkpoint is committed."""


class RecordRejectedError(SinkError):
    """The sink refuses one record permanently (too large, not encodable, ...)."""


class TransactionFencedError(SinkError):
    """Exactly-once delivery: another process claimed the transactions this one wrote into (a
    worker group gave its bucket to another member, or a second process runs the pipeline). What
    this one wrote since its last commit is aborted; it must not write for them again."""


class DeadLetterRefusedError(SinkError):
    """The dead-letter destination refused records: they were rejected once already and have
    nowhere else to go, so the pipeline stops rather than lose them."""


class ConverterError(CdcflowError):
    """A record cannot be converted to or from bytes."""


class DecimalTooLongError(ConverterError, ValueError):
    """A decimal whose plain text (Java's ``toPlainString``, which the JSON forms and
    ``decimal_handling: string`` write) would be longer than cdcflow writes: ``1E+1308565576``, a
    valid CQL decimal, is 1.3 GB of zeros in plain text. The record is refused (dead letters, or the
    pipeline stops) instead of the worker running out of memory. A ValueError too, so that what
    declines a value that does not fit (the compiled core's batch encoders, ``json.dumps``'s
    callers) declines this one alike."""


class DecimalOutOfDoubleRangeError(ConverterError, ValueError):
    """A decimal beyond a double's range (about ±1.8E+308) under ``decimal_handling: double``: as a
    double it would be Infinity, which is not JSON and not the value, so the record is refused
    (dead letters, or the pipeline stops). ``double`` rounds to the nearest double; it never
    changes a value's magnitude. A ValueError too, as :class:`DecimalTooLongError`."""


class SchemaRegistryError(ConverterError):
    """The schema registry refused a schema or could not be reached."""


class IncompatibleSchemaError(SchemaRegistryError):
    """The registry refused a schema as incompatible with the subject's earlier versions (HTTP 409)."""


class SchemaRegistryUnavailableError(SchemaRegistryError, TransientError):
    """The registry cannot be reached, is overloaded (5xx, 429) or refuses the credentials (401,
    403, retried in case they are being renewed)."""


class CheckpointError(CdcflowError):
    """Offsets cannot be loaded or committed."""


class CheckpointUnavailableError(CheckpointError, TransientError):
    """The checkpoint store cannot be reached right now."""


class CheckpointCorruptError(CheckpointError):
    """A stored checkpoint cannot be read back."""


class ProtocolError(CdcflowError):
    """A peer answered in a way its protocol does not allow."""


class StartupCheckError(CdcflowError):
    """At start, a sink, source or checkpoint store could not reach its system within
    ``engine.startup_timeout_s``, or its system refused the credentials or certificates. Not
    retried: the message names the setting and the address to fix."""


class PrerequisiteFailedError(StartupCheckError):
    """At start, a plugin's cheap prerequisite checks found what would make the pipeline deliver
    nothing or lose changes (a table with CDC off): the message names each failed check and its
    fix; ``cdcflow doctor FILE`` runs every check (:mod:`cdcflow.prerequisites`)."""

    def __init__(self, pipeline: str, failed: Sequence[tuple[str, str, str, str]]) -> None:
        self.pipeline = pipeline
        self.failed = list(failed)  # (plugin, check, found, fix)
        lines = [f"pipeline {pipeline} cannot start: a prerequisite is not met (cdcflow doctor FILE checks them all)"]
        lines += [f"  {where}: {check}: {found}; fix: {fix}" for where, check, found, fix in self.failed]
        super().__init__("\n".join(lines))


class RestTlsError(ConfigError):
    """The REST control plane's ``rest.tls`` certificate, key or client CA cannot be loaded."""


class EngineError(CdcflowError):
    """An execution engine (worker, spark) failed to run a pipeline."""


class EngineUnavailableError(EngineError):
    """The engine cannot start on this machine: a missing package, Java missing or too old."""


class EngineUnsupportedError(EngineError):
    """A pipeline asks for something its engine cannot do (a Spark-only sink on the worker engine...)."""


class GroupUnavailableError(EngineError, TransientError):
    """A worker group's topics or control channel cannot be reached right now."""


class OffsetsChangeError(CdcflowError):
    """Offsets cannot be set or reset as asked."""


class PipelineRunningError(OffsetsChangeError):
    """The pipeline runs: its next checkpoint would overwrite the change."""


class UnknownPartitionError(OffsetsChangeError):
    """An offsets change names a partition the pipeline does not have."""


class SnapshotRequestError(CdcflowError):
    """A live snapshot (``cdcflow snapshot``, ``POST /pipelines/{name}/snapshots``) cannot be
    requested as asked; nothing was queued."""


class SnapshotUnsupportedError(SnapshotRequestError):
    """The pipeline's source cannot take live snapshots (or not of this table's partitions)."""


class SnapshotTableError(SnapshotRequestError):
    """The requested table is not one the source follows."""


class SnapshotWhereError(SnapshotRequestError):
    """The ``--where`` condition is not a single CQL condition, or the database refuses it."""


class RetriesExhaustedError(CdcflowError):
    """A transient failure lasted longer than the retry policy allows."""

    def __init__(self, operation: str, attempts: int, last: BaseException) -> None:
        self.operation, self.attempts, self.last = operation, attempts, last
        super().__init__(f"{operation} failed {attempts} times; last error: {type(last).__name__}: {last}")
