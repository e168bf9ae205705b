"""The ``kafka`` sink and the ``kafka`` checkpoint store."""

from sinks.kafka.sink import KafkaSink, KafkaSinkConfig, client_settings

__all__ = ["KafkaSink", "KafkaSinkConfig", "client_settings"]
