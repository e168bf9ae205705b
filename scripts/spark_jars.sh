#!/usr/bin/env bash
# Spark's Kafka connector and Delta Lake (delta-spark) for the installed pyspark, from Maven Central
# into the cache, so that a Kafka-sourced or Delta-writing Spark pipeline needs no network at run time.
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

# Keep only the jars pyspark lacks (it ships Spark itself and the common libraries: lz4, snappy,
# zstd, slf4j, jackson, hadoop...), so no class exists twice on the classpath.
prune_shipped() {
  for jar in "$1"/*.jar; do
    artifact="$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9.]+)*\.jar$//')"
    if compgen -G "$spark_home/jars/$artifact-[0-9]*.jar" > /dev/null; then rm -f "$jar"; fi
  done
}

install_kafka() {
  echo "spark-jars: resolving spark-sql-kafka-0-10 $spark_version from Maven Central into $jars" >&2
  rm -rf "$jars" && mkdir -p "$jars"
  mvn -q -B -Dstyle.color=never -f "$here/maven/spark-kafka/pom.xml" dependency:copy-dependencies \
    -Dspark.version="$spark_version" -DincludeScope=runtime -DoutputDirectory="$jars" >&2
  prune_shipped "$jars"
  touch "$jars/.complete"
}

# Delta comes after the Kafka connector into the same folder (a cache that predates it gets it on
# the next install): resolved aside, then moved in, so a half-done resolution leaves nothing behind.
install_delta() {
  local binary="${spark_version%.*}" staging="$jars/.delta-staging"
  echo "spark-jars: resolving delta-spark for Spark $binary from Maven Central into $jars" >&2
  rm -rf "$staging" && mkdir -p "$staging"
  mvn -q -B -Dstyle.color=never -f "$here/maven/spark-delta/pom.xml" dependency:copy-dependencies \
    -Dspark.binary="$binary" -DincludeScope=runtime -DoutputDirectory="$staging" >&2
  prune_shipped "$staging"
  # Under other names pyspark ships these too: jackson (a module built for an older one than Spark's),
  # commons-logging (jcl-over-slf4j), RoaringBitmap's shims (in RoaringBitmap 1.x).
  rm -f "$staging"/jackson-*.jar "$staging"/commons-logging-*.jar "$staging"/shims-*.jar
  for jar in "$staging"/*.jar; do
    if [ ! -e "$jars/$(basename "$jar")" ]; then mv "$jar" "$jars/"; fi
  done
  rm -rf "$staging"
  touch "$jars/.complete-delta"
}

install() {
  if [ ! -f "$jars/.complete" ]; then install_kafka; fi
  if [ ! -f "$jars/.complete-delta" ]; then install_delta; fi
  echo "$jars"
}

case "${1:-install}" in
  install) install ;;
  path) if [ -f "$jars/.complete" ]; then echo "$jars"; fi ;;
  *) die "usage: $0 install|path" ;;
esac
