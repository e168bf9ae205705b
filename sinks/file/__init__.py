"""The ``file`` sink: JSON lines on local disk, for dead letters and debugging."""

from sinks.file.sink import FileSink, FileSinkConfig

__all__ = ["FileSink", "FileSinkConfig"]
