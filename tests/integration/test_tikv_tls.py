"""TiKV over mutual TLS: the stand-ins serve PD and the stores with certificates the test makes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cdcflow.contract import PluginContext
from cdcflow.sources.tikv_client.exceptions import TiKVServerError, TiKVUnavailableError
from cdcflow.sources.tikv_client.pd import PDClient
from cdcflow.sources.tikv_rawkv.exceptions import FeedRefusedError
from cdcflow.sources.tikv_rawkv.source import TiKVRawKVSource, TiKVRawKVSourceConfig
from tests.integration.tikv_helpers import (
    REAL_UPSTREAM,
    Certificates,
    TiKVCluster,
    key_range,
    make_certificates,
    pipeline_file,
    start_cluster,
    start_worker,
    stop_worker,
    wait_until,
)

pytestmark = pytest.mark.skipif(bool(REAL_UPSTREAM), reason="serves TLS from certificates the test makes")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def upstream(certificates: Certificates) -> Iterator[TiKVCluster]:
    yield from start_cluster(None, tls=certificates.client(), stores=2, tls_dir=certificates.folder)


@pytest.fixture(scope="module")
def downstream(certificates: Certificates) -> Iterator[TiKVCluster]:
    # The downstream also checks the client certificate's common name, as TiKV's cert-allowed-cn.
    yield from start_cluster(
        None, tls=certificates.client(), stores=1, tls_dir=certificates.folder, cert_allowed_cn=["cdcflow"]
    )


def test_tikv_to_tikv_replicates_over_mutual_tls(
    upstream: TiKVCluster, downstream: TiKVCluster, certificates: Certificates, tmp_path: Path
) -> None:
    start, end = key_range("tls")
    upstream.split(start + b"k0100")
    sink = {
        "type": "tikv",
        "pd_endpoints": [downstream.pd],
        "workers": 2,
        "batch_max_ms": 100,
        "tls": certificates.settings(),
    }
    file = pipeline_file(
        tmp_path,
        upstream,
        None,
        start,
        end,
        upstream.ts_before_writes(),
        sink=sink,
        tls=certificates.settings(),
    )
    worker = start_worker(file)
    try:
        wait_until(lambda: upstream.control("feed_subscriptions") >= 2, 60, "the worker to subscribe over TLS")
        upstream.kv.batch_put([(start + b"k%04d" % n, b"v%d" % n) for n in range(200)])
        upstream.kv.batch_delete([start + b"k%04d" % n for n in range(0, 200, 10)])
        wait_until(
            lambda: downstream.snapshot(start, end) == upstream.snapshot(start, end), 60, "downstream to converge"
        )
    finally:
        log = stop_worker(worker, file)
    assert worker.returncode == 0, log
    assert len(downstream.snapshot(start, end)) == 180


def test_a_client_without_the_clusters_trust_is_refused_with_a_clear_error(
    upstream: TiKVCluster, certificates: Certificates
) -> None:
    plain = PDClient([upstream.pd], timeout_s=3.0)
    with pytest.raises(TiKVUnavailableError, match="tls"):
        plain.connect()
    plain.close()
    # A certificate another CA signed fails the handshake, as a missing one does.
    rogue = PDClient([upstream.pd], timeout_s=3.0, tls=certificates.rogue())
    with pytest.raises(TiKVUnavailableError, match="tls"):
        rogue.connect()
    rogue.close()


def test_a_store_that_does_not_allow_the_certificates_common_name_fails_requests_and_feeds_at_once(
    certificates: Certificates, tmp_path: Path
) -> None:
    # TiKV's cert-allowed-cn answers UNAUTHENTICATED: no retry changes the certificate.
    gen = start_cluster(None, tls=certificates.client(), stores=1, tls_dir=certificates.folder, cert_allowed_cn=["ops"])
    cluster = next(gen)
    try:
        with pytest.raises(TiKVServerError, match=r"certificate.*cert-allowed-cn"):
            cluster.kv.put(b"tls/refused", b"1")
        start, end = key_range("tlscn")
        source = TiKVRawKVSource(
            TiKVRawKVSourceConfig(
                type="tikv_rawkv",
                pd_endpoints=[cluster.pd],
                start_key=start.decode(),
                end_key=end.decode(),
                tls=certificates.client(),
            ),
            PluginContext("tikv-tls-test", tmp_path / "p.yaml"),
        )
        source.open()
        try:
            partition = source.partitions()[0]
            offset = source.initial_offset(partition)
            refused: list[FeedRefusedError] = []

            def fails() -> bool:
                try:
                    source.latest_offset(partition, offset, None)
                except FeedRefusedError as exc:
                    refused.append(exc)
                return bool(refused)

            wait_until(fails, 15, "the feed to be refused")
            assert "cert-allowed-cn" in str(refused[0])
        finally:
            source.close()
    finally:
        gen.close()
