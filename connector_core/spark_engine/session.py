"""Starting Spark with defaults that work on a laptop and settings that reach a cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.errors import EngineUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "MIN_JAVA_MAJOR",
    "connector_jars",
    "is_local_master",
    "java_major_version",
    "spark_session",
    "spark_version",
]

MIN_JAVA_MAJOR = 17  # Spark 4's floor
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def spark_version() -> str:
    try:
        import pyspark
    except ImportError as exc:
        raise EngineUnavailableError(
            "the spark engine needs pyspark; install cdcflow with its dependencies (pip install cdcflow)"
        ) from exc
    return str(pyspark.__version__)


def _java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    """The major version ``java -version`` reports (``1.8`` is 8), or None if unreadable."""
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def _check_java() -> None:
    java = _java_executable()
    if java is None:
        raise EngineUnavailableError(
            f"the spark engine needs Java {MIN_JAVA_MAJOR} or newer and found none: set JAVA_HOME or put java on PATH"
        )
    major = java_major_version(java)
    if major is None or major < MIN_JAVA_MAJOR:
        raise EngineUnavailableError(
            f"the spark engine needs Java {MIN_JAVA_MAJOR} or newer; {java} is "
            f"{'of unknown version' if major is None else f'Java {major}'}: set JAVA_HOME to a newer one"
        )


def connector_jars() -> list[Path]:
    """Spark connectors (``spark-sql-kafka``) that ``scripts/spark_jars.sh`` put in the cache for
    this Spark version; local jars, so a query needs no network to start."""
    cache = Path(os.environ.get("CDCFLOW_CACHE", Path.home() / ".cache" / "cdcflow"))
    folder = cache / "spark-jars" / spark_version()
    if not (folder / ".complete").exists():
        return []
    return sorted(folder.glob("*.jar"))


def is_local_master(master: str | None) -> bool:
    """``local``, ``local[N]``, ``local[*]``...: driver and executors in this process's JVM."""
    return master is None or master == "local" or master.startswith("local[")


def spark_session(
    app_name: str,
    master: str | None,
    conf: Mapping[str, str],
    jars: Sequence[Path] | None = None,
    python: str | None = None,
    executor_timeout_s: float = 120.0,
) -> SparkSession:
    """A session on ``master`` (``local[*]`` by default) with cdcflow's defaults under ``conf``.

    On a cluster the driver binds and advertises itself as Spark does by default (executors on
    other hosts must reach it), executors run ``python`` (``spark.pyspark.python``), and the
    session is given up, naming the resources asked for, if no executor joins within
    ``executor_timeout_s``.
    """
    spark_version()
    _check_java()
    jars = connector_jars() if jars is None else jars
    local = is_local_master(master)
    # Executors must run an interpreter with cdcflow and the pipeline's plugins installed.
    python = python or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        # Driver and executors share this JVM: nothing outside this machine needs to reach it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.pyspark.python": python,
        # cdcflow's log4j file exists where the driver runs; executors keep their cluster's own
        # configuration (each worker's Spark conf/), not a path that may not exist on their host.
        # Local executors live in the driver's JVM and so log as the driver does.
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG_CONFIG}",
        # The kafka source passes SASL credentials (sasl.jaas.config) and a client key by value.
        "spark.redaction.regex": r"(?i)secret|password|token|access[.]?key|jaas|keystore\.key",
        # A micro-batch's Python rows are small; Arrow transfer is what keeps Python sources fast.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    builder = SparkSession.builder.appName(app_name).master(master or "local[*]")
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    if jars:
        existing = conf.get("spark.jars")
        builder = builder.config("spark.jars", ",".join([*(existing.split(",") if existing else []), *map(str, jars)]))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    if not local:
        _wait_for_an_executor(session, master or "", executor_timeout_s)
    return session


# What decides whether a cluster manager can place an executor, as an error message names them.
_RESOURCE_SETTINGS = (
    ("spark.executor.memory", "1g"),
    ("spark.executor.cores", "all of a standalone worker's cores, 1 on YARN"),
    ("spark.cores.max", "no limit"),
    ("spark.executor.instances", "unset"),
    ("spark.executor.memoryOverhead", "10% of spark.executor.memory, at least 384m"),
)


def _wait_for_an_executor(session: SparkSession, master: str, timeout_s: float) -> None:
    """Return once an executor joined the application; else stop the session and fail, naming
    the resources asked for (Spark itself would only log "Initial job has not accepted any
    resources" and wait forever)."""
    tracker = session.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(tracker.getExecutorInfos()) > 1:  # the driver is listed too
            return
        time.sleep(0.5)
    conf = session.sparkContext.getConf()
    asked = ", ".join(f"{name} = {conf.get(name, f'({default})')}" for name, default in _RESOURCE_SETTINGS)
    driver = conf.get("spark.driver.host", "(unknown)")
    session.stop()
    raise EngineUnavailableError(
        f"no executor joined the Spark application on {master} within {timeout_s:g} s (engine.executor_timeout_s). "
        f"Either no worker has the free resources asked for ({asked}; set them under engine.conf to what a "
        f"worker offers), or the executors cannot reach the driver at {driver} (spark.driver.host, "
        "spark.driver.port, spark.blockManager.port; firewalls)"
    )
