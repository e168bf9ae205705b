"""The ``kafka`` source: topics read through a consumer group, committed only after the sink flushed."""

from cdcflow.sources.kafka.source import KafkaSource, KafkaSourceConfig

__all__ = ["KafkaSource", "KafkaSourceConfig"]
