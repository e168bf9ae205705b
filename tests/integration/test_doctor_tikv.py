"""``cdcflow doctor`` and the start-up check of the ``tikv_rawkv`` source, from what the TiKV
stand-in's PD and stores answer (issue 27, item 1), and its data-loss headroom: the GC TTL less
the checkpoint's age (item 2)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdcflow.checkpoints import FileCheckpointConfig, FileCheckpointStore
from cdcflow.contract import Checkpoint, Partition, PluginContext
from cdcflow.errors import PrerequisiteFailedError
from cdcflow.sources.tikv_client.codec import LOGICAL_BITS, ts_to_us
from cdcflow.sources.tikv_rawkv.source import TiKVRawKVSource, TiKVRawKVSourceConfig
from tests.integration.doctor_helpers import doctor
from tests.integration.snapshot_helpers import runner_for
from tests.integration.tikv_helpers import REAL_UPSTREAM, TiKVCluster, key_range, pipeline_file, start_cluster

pytestmark = pytest.mark.skipif(bool(REAL_UPSTREAM), reason="drives the stand-in's versions and GC")


@contextlib.contextmanager
def _cluster(**options: Any) -> Iterator[TiKVCluster]:
    yield from start_cluster(None, stores=1, **options)


def _file_sink_pipeline(folder: Path, cluster: TiKVCluster) -> Path:
    start, end = key_range("doctor")
    sink = {"type": "file", "path": str(folder / "out.jsonl")}
    return pipeline_file(folder, cluster, None, start, end, cluster.ts_before_writes(), sink=sink)


def test_doctor_passes_a_cluster_on_api_v2_and_a_supported_version(tmp_path: Path) -> None:
    with _cluster(tikv_version="6.5.3") as cluster:
        code, checks, _ = doctor(_file_sink_pipeline(tmp_path, cluster))
    assert code == 0, checks
    assert checks["TiKV 6.2.0 or later on every store"] == {
        "check": "TiKV 6.2.0 or later on every store",
        "status": "ok",
        "detail": "1 store(s): 6.5.3",
        "fix": "",
    }
    assert checks["API V2 storage (keyspace 0)"]["status"] == "ok"
    assert checks["above the GC safepoint"]["status"] == "ok"


def test_doctor_fails_an_old_tikv_on_api_v1_naming_store_and_version(tmp_path: Path) -> None:
    with _cluster(tikv_version="6.1.0", api_version=1) as cluster:
        code, checks, _ = doctor(_file_sink_pipeline(tmp_path, cluster))
        address = next(iter(cluster.standin.stores.values()))  # type: ignore[union-attr]
    assert code == 1
    version = checks["TiKV 6.2.0 or later on every store"]
    assert version["status"] == "fail" and f"({address}) runs 6.1.0" in version["detail"], version
    api = checks["API V2 storage (keyspace 0)"]
    assert api["status"] == "fail" and "storage.api-version = 2" in api["fix"], api


def test_run_refuses_at_start_a_store_too_old_for_rawkv_change_data(tmp_path: Path) -> None:
    with _cluster(tikv_version="6.1.0") as cluster:
        runner = runner_for(_file_sink_pipeline(tmp_path, cluster))
        with pytest.raises(PrerequisiteFailedError) as refused:
            runner.run()
    assert "TiKV 6.2.0 or later on every store" in str(refused.value) and "runs 6.1.0" in str(refused.value)


def test_doctor_fails_a_checkpoint_below_the_gc_safepoint(tmp_path: Path) -> None:
    with _cluster() as cluster:
        file = _file_sink_pipeline(tmp_path, cluster)
        checkpoint_ts = cluster.pd_client.get_ts()
        store = FileCheckpointStore(
            FileCheckpointConfig(type="file", path=tmp_path / "checkpoints"), PluginContext("any", file)
        )
        store.open()
        store.commit({"p0": Checkpoint({"ts": checkpoint_ts}, ts_to_us(checkpoint_ts), int(time.time() * 1e6))})
        code, checks, _ = doctor(file)
        assert code == 0 and checks["above the GC safepoint"]["status"] == "ok", checks

        # A GC worker moves the safepoint past the checkpoint, as TiKV's would once no service holds it.
        cluster.pd_client.update_gc_safe_point(checkpoint_ts + (1000 << LOGICAL_BITS))
        code, checks, _ = doctor(file)
    assert code == 1
    gc = checks["above the GC safepoint"]
    assert gc["status"] == "fail" and f"ts {checkpoint_ts} is below the cluster's GC safepoint" in gc["detail"], gc


def test_the_headroom_is_the_gc_ttl_less_the_checkpoints_age(tmp_path: Path) -> None:
    with _cluster() as cluster:
        config = TiKVRawKVSourceConfig(type="tikv_rawkv", pd_endpoints=[cluster.pd], gc_ttl_s=600)
        source = TiKVRawKVSource(config, PluginContext("headroom", tmp_path / "p.yaml"))
        old = cluster.pd_client.get_ts() - (100_000 << LOGICAL_BITS)  # PD's now less 100 s
        headroom = source.data_loss_headroom(Partition("p0"), {"ts": old})
    assert headroom is not None and headroom.reason == "gc_safepoint"
    assert 600 - 100 - 5 < headroom.seconds <= 600 - 100, headroom
