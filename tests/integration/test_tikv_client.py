"""The PD/TiKV client against the stand-in, where it behaves as the upstream servers do: PD's
cluster-id check, region errors, per-key errors, raft entry limits, range deletes, region epochs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdcflow.sources.tikv_client import PDClient
from cdcflow.sources.tikv_client.exceptions import PDError
from tests.integration.tikv_helpers import REAL_UPSTREAM, TiKVCluster, start_cluster
from tests.standins.tikv.control import StandinCluster


@pytest.fixture(scope="module")
def upstream() -> Iterator[TiKVCluster]:
    yield from start_cluster(REAL_UPSTREAM)


def test_a_pd_client_that_never_connected_sends_the_cluster_id_on_its_first_call(upstream: TiKVCluster) -> None:
    # Real PD fails every call but GetMembers whose header does not carry its cluster id.
    pd = PDClient([upstream.pd])
    try:
        region = pd.get_region(b"")
        assert region.id > 0 and pd.cluster_id != 0
        assert pd.get_gc_safe_point() >= 0
    finally:
        pd.close()


def test_pd_endpoints_of_two_clusters_are_refused_not_followed() -> None:
    if REAL_UPSTREAM:
        pytest.skip("needs two stand-ins with different cluster ids")
    first, second = StandinCluster.start(stores=1, cluster_id=7), StandinCluster.start(stores=1, cluster_id=8)
    pd = PDClient([first.pd, second.pd], timeout_s=2.0)
    try:
        pd.get_ts()
        first.stop()  # the client moves to the next endpoint: another cluster's PD
        with pytest.raises(PDError, match=r"cluster 8, not cluster 7"):
            for _ in range(3):
                pd.get_region(b"")
    finally:
        pd.close()
        first.stop()
        second.stop()
