"""``python -m tests.standins.tikv [--stores N] [--tikv-version X.Y.Z] ...``: serves until stdin closes or SIGTERM.

Prints one JSON line: ``{"pd": "127.0.0.1:PORT", "pd_members": ["127.0.0.1:PORT", ...],
"stores": {"1": "127.0.0.1:PORT", ...}, "control": "127.0.0.1:PORT"}``; ``pd`` is the first
member, PD's leader at start. The control service (tests only) has a port of its own, always
without TLS; with ``--tls-dir`` PD and the stores serve mutual TLS only.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from tests.standins.tikv.causal_ts import RENEW_INTERVAL_S
from tests.standins.tikv.cluster import Cluster
from tests.standins.tikv.services import (
    change_data_handler,
    control_handler,
    health_handler,
    pd_handler,
    tikv_handler,
)

_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def server_credentials(folder: Path) -> grpc.ServerCredentials:
    """Mutual TLS from ``ca.pem``, ``server.pem`` and ``server-key.pem``, as TiKV serves it
    (tikv/tikv components/security/src/lib.rs ``SecurityManager::bind``:
    RequestAndRequireClientCertificateAndVerify) and PD (tikv/pd server/config/config.go:
    ClientCertAuth whenever a CA is configured): a client without a certificate the CA signed
    fails the handshake."""
    return grpc.ssl_server_credentials(
        [((folder / "server-key.pem").read_bytes(), (folder / "server.pem").read_bytes())],
        root_certificates=(folder / "ca.pem").read_bytes(),
        require_client_auth=True,
    )


class CommonNameCheck(grpc.ServerInterceptor):
    """TiKV's ``cert-allowed-cn`` (security/src/lib.rs ``CnChecker``): a call whose client
    certificate's common name is not listed fails with UNAUTHENTICATED."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = set(allowed)

    def _check(self, context: Any) -> None:
        names = {n.decode() for n in context.auth_context().get("x509_common_name", [])}
        if not names & self.allowed:
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"Common name check fail, reason: {sorted(names)} not allowed, cert_allowed_cn: {sorted(self.allowed)}",
            )

    def intercept_service(
        self, continuation: Callable[[Any], grpc.RpcMethodHandler | None], details: Any
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None:
            return None
        if handler.unary_unary is not None:
            unary = handler.unary_unary

            def checked_unary(request: Any, context: Any) -> Any:
                self._check(context)
                return unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                checked_unary, handler.request_deserializer, handler.response_serializer
            )
        stream = handler.stream_stream

        def checked_stream(requests: Iterator[Any], context: Any) -> Iterator[Any]:
            self._check(context)
            yield from stream(requests, context)

        return grpc.stream_stream_rpc_method_handler(
            checked_stream, handler.request_deserializer, handler.response_serializer
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", type=int, default=3)
    parser.add_argument("--cluster-id", type=int, default=7)
    parser.add_argument("--resolved-ts-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--tikv-version", default="8.5.0", help="the TiKV release whose feed rules to follow")
    parser.add_argument("--api-version", type=int, choices=(1, 2), default=2, help="TiKV's storage.api-version")
    parser.add_argument("--store-cluster-id", type=int, default=None, help="the stores' cluster id (default PD's)")
    parser.add_argument("--raft-entry-max-size", type=int, default=8 << 20, help="bytes, raftstore's limit")
    parser.add_argument("--tls-dir", type=Path, default=None, help="ca.pem, server.pem, server-key.pem: mutual TLS")
    parser.add_argument("--cert-allowed-cn", action="append", default=[], help="TiKV's cert-allowed-cn (stores)")
    parser.add_argument(
        "--scan-concurrency-limit", type=int, default=10_000, help="cdc.incremental-scan-concurrency-limit per store"
    )
    parser.add_argument("--sink-memory-quota", type=int, default=512 << 20, help="bytes, cdc.sink-memory-quota")
    args = parser.parse_args()
    credentials = server_credentials(args.tls_dir) if args.tls_dir else None

    def listen(server: grpc.Server) -> int:
        if credentials is None:
            return int(server.add_insecure_port("127.0.0.1:0"))
        return int(server.add_secure_port("127.0.0.1:0", credentials))

    cluster = Cluster(
        args.cluster_id,
        list(range(1, args.stores + 1)),
        args.tikv_version,
        api_version=args.api_version,
        store_cluster_id=args.store_cluster_id,
        raft_entry_max_size=args.raft_entry_max_size,
        scan_concurrency_limit=args.scan_concurrency_limit,
        sink_memory_quota=args.sink_memory_quota,
    )
    servers = []
    store_servers: dict[int, grpc.Server] = {}
    interceptors = [CommonNameCheck(args.cert_allowed_cn)] if args.cert_allowed_cn else []

    def start_store(store_id: int) -> str:
        server = grpc.server(ThreadPoolExecutor(max_workers=32), options=_OPTIONS, interceptors=interceptors)
        port = listen(server)
        server.add_generic_rpc_handlers(
            (tikv_handler(cluster, store_id), change_data_handler(cluster, store_id), health_handler())
        )
        store_servers[store_id] = server
        return f"127.0.0.1:{port}"  # PD lists store addresses as host:port with or without TLS.

    def stop_store(store_id: int) -> None:
        server = store_servers.pop(store_id, None)
        if server is not None:
            server.stop(grace=None)

    for store_id in cluster.store_ids:
        cluster.store_addresses[store_id] = start_store(store_id)

    def start_added_store(store_id: int) -> str:
        address = start_store(store_id)
        store_servers[store_id].start()
        return address

    cluster.start_store_server = start_added_store
    cluster.stop_store_server = stop_store
    pd_addresses = []
    pd_servers: dict[int, grpc.Server] = {}
    for member_id in cluster.pd_members:
        pd_server = grpc.server(ThreadPoolExecutor(max_workers=16), options=_OPTIONS)
        pd_port = listen(pd_server)
        pd_addresses.append(f"127.0.0.1:{pd_port}")
        # With TLS, PD's members advertise https:// client URLs.
        cluster.pd_urls[member_id] = f"{'https' if credentials else 'http'}://127.0.0.1:{pd_port}"
        pd_server.add_generic_rpc_handlers((pd_handler(cluster, member_id),))
        servers.append(pd_server)
        pd_servers[member_id] = pd_server
    cluster.stop_pd_server = lambda member: pd_servers[member].stop(grace=None)
    control_server = grpc.server(ThreadPoolExecutor(max_workers=8), options=_OPTIONS)
    control_port = control_server.add_insecure_port("127.0.0.1:0")
    control_server.add_generic_rpc_handlers((control_handler(cluster),))
    servers.append(control_server)
    for server in [*servers, *store_servers.values()]:
        server.start()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def tick() -> None:
        while not stop.wait(args.resolved_ts_interval):
            cluster.advance_resolved_ts()

    def renew() -> None:  # causal_ts.py: every store renews its timestamp cache every 100 ms
        while not stop.wait(RENEW_INTERVAL_S):
            cluster.tick()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=tick, daemon=True).start()
    threading.Thread(target=renew, daemon=True).start()
    threading.Thread(target=watch_stdin, daemon=True).start()
    addresses = {
        "pd": pd_addresses[0],
        "pd_members": pd_addresses,
        "stores": cluster.store_addresses,
        "control": f"127.0.0.1:{control_port}",
    }
    print(json.dumps(addresses), flush=True)
    stop.wait()
    for server in [*servers, *store_servers.values()]:
        server.stop(grace=0.5)


if __name__ == "__main__":
    main()
