"""The ``kafka`` sink and the ``kafka`` checkpoint store."""

from cdcflow.sinks.kafka.checkpoint_store import KafkaCheckpointConfig, KafkaCheckpointStore
from cdcflow.sinks.kafka.sink import KafkaSink, KafkaSinkConfig

__all__ = ["KafkaCheckpointConfig", "KafkaCheckpointStore", "KafkaSink", "KafkaSinkConfig"]
