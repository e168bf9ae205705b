"""The ScyllaDB CDC source: generation- and stream-aware reading of CDC log tables."""

__all__: list[str] = []
