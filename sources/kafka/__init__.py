"""The ``kafka`` source: topics read through a consumer group, committed only after the sink flushed."""
