"""The ``kafka`` sink and the ``kafka`` checkpoint store."""

from sinks.kafka.checkpoint_store import KafkaCheckpointConfig, KafkaCheckpointStore
from sinks.kafka.sink import KafkaSink, KafkaSinkConfig, client_settings

__all__ = ["KafkaCheckpointConfig", "KafkaCheckpointStore", "KafkaSink", "KafkaSinkConfig", "client_settings"]
