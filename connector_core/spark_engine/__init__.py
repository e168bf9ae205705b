"""The spark engine: a cdcflow pipeline as a Spark Structured Streaming query (needs pyspark and Java 17+).

This package's ``__init__`` imports nothing, so that its pyspark-free modules
(:mod:`~cdcflow.spark_engine.offsets`, :mod:`~cdcflow.spark_engine.session`) load without pyspark,
and listing plugins or validating a worker pipeline never imports it. Plugins import none of it:
what a Spark plugin needs is the public :mod:`cdcflow.spark_rows`. The engine itself,
:func:`cdcflow.spark_engine.runner.run_spark`, and its data source
(:mod:`~cdcflow.spark_engine.datasource`) import pyspark: only a Spark pipeline's run, or the
planning of its queries, loads them.
"""
