"""The spark engine: a cdcflow pipeline as a Spark Structured Streaming query (needs pyspark and Java 17+)."""

from cdcflow.spark_engine.runner import checkpoint_location, run_spark, run_spark_pipeline

__all__ = ["checkpoint_location", "run_spark", "run_spark_pipeline"]
