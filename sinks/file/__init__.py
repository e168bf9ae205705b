"""The ``file`` sink: JSON lines on local disk, for dead letters and debugging."""

from cdcflow.sinks.file.sink import FileSink, FileSinkConfig

__all__ = ["FileSink", "FileSinkConfig"]
