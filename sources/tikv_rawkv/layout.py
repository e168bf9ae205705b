"""The partition map: the key range cut into sub-ranges at region boundaries, fixed once.

Partitions must keep their ids and ranges across restarts (checkpoints are stored per id) while
regions keep splitting and merging, so the cut is made once, from the regions PD reports when the
pipeline first starts, and stored in a small JSON file next to the pipeline. Every later start,
and every worker process of the pipeline, reads the same file. The file also fixes the timestamp
a partition without a checkpoint starts from, so a crash before the first checkpoint resumes
where the first start began instead of at a newer "now".
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cdcflow.contract import Partition
from cdcflow.sources.tikv_client.codec import KeyCodec, decode_memcomparable
from cdcflow.sources.tikv_rawkv.exceptions import PartitionLayoutError

if TYPE_CHECKING:
    from cdcflow.sources.tikv_client.pd import PDClient

__all__ = ["PartitionLayout"]


@dataclass(frozen=True)
class PartitionLayout:
    keyspace_id: int
    start_key: bytes
    end_key: bytes  # empty: the end of the keyspace
    start_ts: int
    boundaries: tuple[bytes, ...]  # user keys inside (start_key, end_key), ascending

    def ranges(self) -> list[tuple[bytes, bytes]]:
        edges = [self.start_key, *self.boundaries, self.end_key]
        return list(itertools.pairwise(edges))

    def partitions(self) -> list[Partition]:
        out = []
        for index, (start, end) in enumerate(self.ranges()):
            digest = hashlib.sha1(b"%d|%s|%s" % (self.keyspace_id, start, end)).hexdigest()[:8]
            out.append(
                Partition(f"tikv-ks{self.keyspace_id}-{index:03d}-{digest}", {"start": start.hex(), "end": end.hex()})
            )
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "keyspace_id": self.keyspace_id,
            "start_key": self.start_key.hex(),
            "end_key": self.end_key.hex(),
            "start_ts": self.start_ts,
            "boundaries": [b.hex() for b in self.boundaries],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PartitionLayout:
        return cls(
            int(str(data["keyspace_id"])),
            bytes.fromhex(str(data["start_key"])),
            bytes.fromhex(str(data["end_key"])),
            int(str(data["start_ts"])),
            tuple(bytes.fromhex(str(b)) for b in data["boundaries"]),  # type: ignore[attr-defined]
        )

    @classmethod
    def load_or_create(
        cls,
        path: Path,
        pd: PDClient,
        codec: KeyCodec,
        start_key: bytes,
        end_key: bytes,
        count: int,
        start_ts: Callable[[], int],
    ) -> PartitionLayout:
        """The layout stored at ``path``, or a new one cut from the current regions and stored
        there (if two processes race, the first file written wins and both use it)."""
        if not path.exists():
            created = cls(codec.keyspace_id, start_key, end_key, start_ts(), _cut(pd, codec, start_key, end_key, count))
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as file:
                json.dump(created.to_json(), file, indent=1)
                file.flush()
                os.fsync(file.fileno())
            try:
                os.link(scratch, path)  # fails if another process stored its layout first
            except FileExistsError:
                pass
            finally:
                os.unlink(scratch)
        try:
            layout = cls.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PartitionLayoutError(f"{path}: cannot read the partition map: {exc}") from exc
        if (layout.keyspace_id, layout.start_key, layout.end_key) != (codec.keyspace_id, start_key, end_key):
            raise PartitionLayoutError(
                f"{path}: the partition map is for keyspace {layout.keyspace_id} range "
                f"[{layout.start_key.hex()}, {layout.end_key.hex()}), the config says keyspace {codec.keyspace_id} "
                f"range [{start_key.hex()}, {end_key.hex()}); point partition_map elsewhere to start a new pipeline"
            )
        return layout


def _cut(pd: PDClient, codec: KeyCodec, start_key: bytes, end_key: bytes, count: int) -> tuple[bytes, ...]:
    """Up to ``count - 1`` region start keys inside the range, spread so each part holds about as
    many regions (the seed's sub-range tasks)."""
    region_start, region_end = codec.region_range(start_key, end_key)
    inner: list[bytes] = []
    for region in pd.scan_regions(region_start, region_end):
        key = region.start_key
        if key <= region_start or (region_end and key >= region_end):
            continue
        request_key = decode_memcomparable(key)[0] if codec.api_version == 2 else key
        if request_key.startswith(codec.prefix):
            inner.append(codec.user_key(request_key))
    if count <= 1 or not inner:
        return ()
    regions = len(inner) + 1
    picks = sorted({inner[i * regions // count - 1] for i in range(1, count) if i * regions // count >= 1})
    return tuple(picks)
