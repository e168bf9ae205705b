#!/usr/bin/env bash
# Spark's Kafka connector for the installed pyspark, from Maven Central into the cache, so that a
# Kafka-sourced Spark pipeline needs no network at run time.
#   scripts/spark_jars.sh install   resolve (once per Spark version) and print the folder
#   scripts/spark_jars.sh path      print the folder (empty if not installed)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/_service_lib.sh"
# pyspark is in the project's virtual environment (scripts/setup.sh passes it as PYTHON).
python="${PYTHON:-$(project_python)}"
command -v "$python" >/dev/null \
  || die "spark-jars: no $python (pyspark lives in the project's virtual environment): run scripts/setup.sh first"
spark_version="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
spark_home="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
jars="$CDCFLOW_CACHE/spark-jars/$spark_version"

install() {
  if [ -f "$jars/.complete" ]; then echo "$jars"; return 0; fi
  echo "spark-jars: resolving spark-sql-kafka-0-10 $spark_version from Maven Central into $jars" >&2
  rm -rf "$jars" && mkdir -p "$jars"
  mvn -q -B -Dstyle.color=never -f "$here/maven/spark-kafka/pom.xml" dependency:copy-dependencies \
    -Dspark.version="$spark_version" -DincludeScope=runtime -DoutputDirectory="$jars" >&2
  # pyspark already ships Spark itself and the common libraries (lz4, snappy, zstd, slf4j...):
  # keep only what it lacks, so no class exists twice on the classpath.
  for jar in "$jars"/*.jar; do
    artifact="$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9.]+)*\.jar$//')"
    if compgen -G "$spark_home/jars/$artifact-[0-9]*.jar" > /dev/null; then rm -f "$jar"; fi
  done
  touch "$jars/.complete"
  echo "$jars"
}

case "${1:-install}" in
  install) install ;;
  path) if [ -f "$jars/.complete" ]; then echo "$jars"; fi ;;
  *) die "usage: $0 install|path" ;;
esac
