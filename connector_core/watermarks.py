"""The pipeline watermark: one rule for both engines.

A partition's watermark (a source's ``ReportsWatermarks.watermark``, :mod:`cdcflow.capabilities`)
says no event at or below it can still appear in that partition. The pipeline's is the minimum
over the partitions still running: a finished partition (``FinitePartitions.is_finished``) no
longer holds it back, and once every partition is finished the pipeline is complete up to the last
of them. The worker loop computes it over the partitions it owns
(:class:`cdcflow.pipeline.PipelineRunner`), the spark engine's driver over the end offsets of each
micro-batch (:mod:`cdcflow.spark_engine.runner`); a sink that closes time partitions receives it
(``WatermarkAwareSink.on_watermark``, ``SparkBatchWriter.write_batch``).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["COMPLETE_WATERMARK_US", "pipeline_watermark"]

COMPLETE_WATERMARK_US = 2**63 - 1
"""The watermark of a drained bounded source: nothing will ever be added, every time partition is complete."""


def pipeline_watermark(partitions: Iterable[tuple[int | None, bool]]) -> int | None:
    """The pipeline watermark of partitions given as ``(watermark_us, finished)``; None while no
    partition has one. A partition without a watermark (None) neither holds it back nor sets it."""
    running: list[int] = []
    finished: list[int] = []
    for watermark_us, is_finished in partitions:
        if watermark_us is not None:
            (finished if is_finished else running).append(watermark_us)
    if running:
        return min(running)
    return max(finished) if finished else None
