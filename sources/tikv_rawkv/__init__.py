"""The TiKV RawKV change source, ordered by resolved-ts."""

__all__: list[str] = []
