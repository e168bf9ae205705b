"""Worker groups: identical ``cdcflow run`` processes on any machines share a pipeline's
partitions through a Kafka consumer group, and each serves the REST control plane."""
