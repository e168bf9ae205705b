"""Starting Spark with defaults that work on a laptop and settings that reach a cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.errors import EngineUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MIN_JAVA_MAJOR", "connector_jars", "java_major_version", "spark_session", "spark_version"]

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


def spark_session(
    app_name: str, master: str | None, conf: Mapping[str, str], jars: Sequence[Path] | None = None
) -> SparkSession:
    """A session on ``master`` (``local[*]`` by default) with cdcflow's defaults under ``conf``."""
    spark_version()
    _check_java()
    jars = connector_jars() if jars is None else jars
    # Executors must run this interpreter: it is the one with cdcflow and its plugins installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    log_option = f"-Dlog4j2.configurationFile=file:{_LOG_CONFIG}"
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": log_option,
        "spark.executor.extraJavaOptions": log_option,
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
    return session
