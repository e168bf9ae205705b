"""``python -m tests.standins.tikv [--stores N] [--tikv-version X.Y.Z] ...``: serves until stdin closes or SIGTERM.

Prints one JSON line: ``{"pd": "127.0.0.1:PORT", "stores": {"1": "127.0.0.1:PORT", ...}}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

from tests.standins.tikv.cluster import Cluster
from tests.standins.tikv.services import change_data_handler, control_handler, pd_handler, tikv_handler

_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", type=int, default=3)
    parser.add_argument("--cluster-id", type=int, default=7)
    parser.add_argument("--resolved-ts-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--tikv-version", default="8.5.0", help="the TiKV release whose feed rules to follow")
    parser.add_argument("--api-version", type=int, choices=(1, 2), default=2, help="TiKV's storage.api-version")
    parser.add_argument("--store-cluster-id", type=int, default=None, help="the stores' cluster id (default PD's)")
    parser.add_argument("--raft-entry-max-size", type=int, default=8 << 20, help="bytes, raftstore's limit")
    args = parser.parse_args()

    cluster = Cluster(
        args.cluster_id,
        list(range(1, args.stores + 1)),
        args.tikv_version,
        api_version=args.api_version,
        store_cluster_id=args.store_cluster_id,
        raft_entry_max_size=args.raft_entry_max_size,
    )
    servers = []
    for store_id in cluster.store_ids:
        server = grpc.server(ThreadPoolExecutor(max_workers=32), options=_OPTIONS)
        port = server.add_insecure_port("127.0.0.1:0")
        cluster.store_addresses[store_id] = f"127.0.0.1:{port}"
        server.add_generic_rpc_handlers((tikv_handler(cluster, store_id), change_data_handler(cluster, store_id)))
        servers.append(server)
    pd_server = grpc.server(ThreadPoolExecutor(max_workers=16), options=_OPTIONS)
    pd_port = pd_server.add_insecure_port("127.0.0.1:0")
    pd_server.add_generic_rpc_handlers((pd_handler(cluster, f"127.0.0.1:{pd_port}"), control_handler(cluster)))
    servers.append(pd_server)
    for server in servers:
        server.start()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def tick() -> None:
        while not stop.wait(args.resolved_ts_interval):
            cluster.advance_resolved_ts()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=tick, daemon=True).start()
    threading.Thread(target=watch_stdin, daemon=True).start()
    print(json.dumps({"pd": f"127.0.0.1:{pd_port}", "stores": cluster.store_addresses}), flush=True)
    stop.wait()
    for server in servers:
        server.stop(grace=0.5)


if __name__ == "__main__":
    main()
