"""The spark engine: a cdcflow pipeline as a Spark Structured Streaming query (needs pyspark and Java 17+)."""

from connector_core.spark_engine.runner import checkpoint_location, run_spark_pipeline

__all__ = ["checkpoint_location", "run_spark_pipeline"]
