"""The downstream TiKV sink."""

__all__: list[str] = []
