"""TiKV clusters for the tests: two stand-ins (upstream, downstream), or real ones.

``CDCFLOW_TIKV_PD`` (and ``CDCFLOW_TIKV_DOWNSTREAM_PD``) switch the suite to real clusters: then
nothing drives regions, errors or GC from the test, the steps that need the stand-in's control
are skipped, and the checks that remain compare what the clusters hold.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cdcflow.sources.tikv_client import KeyCodec
from cdcflow.sources.tikv_client.codec import LOGICAL_BITS
from cdcflow.sources.tikv_client.pd import PDClient
from cdcflow.sources.tikv_client.rawkv import RawKVClient
from cdcflow.sources.tikv_client.tls import TLSConfig
from tests.standins.tikv.control import REPO, StandinCluster

REAL_UPSTREAM = os.environ.get("CDCFLOW_TIKV_PD")
REAL_DOWNSTREAM = os.environ.get("CDCFLOW_TIKV_DOWNSTREAM_PD")

# A store stamps RawKV writes from its cache of PD timestamps, taken up to causal-ts
# alloc-ahead-buffer (3 s) before (tikv/tikv components/causal_ts/src/tso.rs:70; the stand-in's
# causal_ts.py): a write made after PD answered "now" can carry a smaller timestamp. A start that
# must come before some writes starts this far back, as TiKV-CDC's own tests do (10 s).
WRITE_TS_MARGIN_MS = 10_000


@dataclass
class TiKVCluster:
    """A PD endpoint, a RawKV client on keyspace 0, and the stand-in's control when there is one."""

    pd: str
    standin: StandinCluster | None
    tls: TLSConfig | None = None

    def __post_init__(self) -> None:
        self.pd_client = PDClient([self.pd], tls=self.tls)
        self.kv = RawKVClient(self.pd_client, KeyCodec(2, 0))

    def control(self, command: str, **args: Any) -> Any:
        if self.standin is None:
            pytest.skip(f"{command} needs the stand-in's control service")
        return self.standin.call(command, **args)

    def split(self, user_key: bytes) -> None:
        """Splits the region at ``user_key`` (keyspace 0); a no-op on a real cluster."""
        if self.standin is not None:
            self.standin.call("split", key=(b"r\x00\x00\x00" + user_key).hex())

    def ts_before_writes(self) -> int:
        """A timestamp below every write made from now on (see WRITE_TS_MARGIN_MS)."""
        return self.pd_client.get_ts() - (WRITE_TS_MARGIN_MS << LOGICAL_BITS)

    def region_ids(self) -> list[int]:
        return [int(r["id"]) for r in self.control("regions")]

    def snapshot(self, start: bytes, end: bytes) -> dict[bytes, bytes]:
        return dict(self.kv.scan_all(start, end))

    def history(self, start: bytes, end: bytes) -> dict[bytes, list[tuple[str, str, bool]]]:
        """Per key, its writes in timestamp order as (op, value hex, has TTL)."""
        raw = self.control("history", start=(b"r\x00\x00\x00" + start).hex(), end=(b"r\x00\x00\x00" + end).hex())
        return {
            bytes.fromhex(k)[4:]: [(op, value, expire is not None) for _, op, value, expire in rows]
            for k, rows in raw.items()
        }

    def close(self) -> None:
        self.kv.close()
        self.pd_client.close()


def start_cluster(real_pd: str | None, tls: TLSConfig | None = None, **options: object) -> Iterator[TiKVCluster]:
    """A cluster for a module: the real one at ``real_pd``, or a stand-in started with ``options``
    (its command-line flags by name, see :meth:`StandinCluster.start`); ``tls``: how the test's
    own clients reach it."""
    standin = None if real_pd else StandinCluster.start(**options)
    cluster = TiKVCluster(real_pd or standin.pd, standin, tls)  # type: ignore[union-attr]
    try:
        yield cluster
    finally:
        cluster.close()
        if standin is not None:
            standin.stop()


def key_range(name: str) -> tuple[bytes, bytes]:
    """A key range of its own for one test: ``<name>-<random>/`` up to ``0`` after it."""
    prefix = f"{name}-{uuid.uuid4().hex[:8]}".encode()
    return prefix + b"/", prefix + b"0"


def pipeline_file(
    folder: Path,
    upstream: TiKVCluster,
    downstream: TiKVCluster | None,
    start: bytes,
    end: bytes,
    start_ts: int,
    sink: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    **source: Any,
) -> Path:
    """A pipeline from ``upstream``'s [start, end) into ``downstream`` (the ``tikv`` sink), or
    into ``sink`` on ``engine``."""
    name = f"tikv-{uuid.uuid4().hex[:8]}"
    if sink is None:
        assert downstream is not None
        sink = {"type": "tikv", "pd_endpoints": [downstream.pd], "workers": 4, "batch_max_ms": 100}
    spec = {
        "name": name,
        "source": {
            "type": "tikv_rawkv",
            "pd_endpoints": [upstream.pd],
            "start_key": start.decode(),
            "end_key": end.decode(),
            "partitions": 2,
            "start_ts": start_ts,
            "safety_interval_ms": 500,
            **source,
        },
        "sink": sink,
        "checkpoint": {"type": "file", "path": str(folder / "checkpoints"), "interval_ms": 500},
        "engine": engine or {"max_records_per_read": 20_000, "poll_interval_ms": 50},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@dataclass(frozen=True)
class Batch:
    keys: list[bytes]
    op: str  # "put", "ttl", "empty" (puts of b"") or "delete"
    values: list[bytes]


def random_batches(rng: random.Random, start: bytes, keys: int, writes: int, batch_size: int) -> list[Batch]:
    """``writes`` random writes over ``keys`` keys as batches of distinct keys and one op type;
    values carry a per-key sequence number, so per-key order shows in what arrives, except the
    empty values RawKV stores as well (a put of ``b""``, never a delete)."""
    names = [start + b"k%06d" % i for i in range(keys)]
    sequence = dict.fromkeys(names, 0)
    batches = []
    for _ in range(writes // batch_size):
        chosen = rng.sample(names, batch_size)
        op = rng.choices(["put", "ttl", "empty", "delete"], [0.55, 0.2, 0.05, 0.2])[0]
        values = []
        for key in chosen:
            sequence[key] += 1
            values.append(b"" if op == "empty" else b"%s=%d" % (key, sequence[key]))
        batches.append(Batch(chosen, op, values))
    return batches


Change = tuple[str, bytes | None, bool]
"""One write as an output should show it: op (``c`` put, ``d`` delete), value, whether it has a TTL."""


def changes_per_key(batches: list[Batch]) -> dict[bytes, list[Change]]:
    """What ``batches``, applied in order, wrote: per key, its writes in order."""
    changes: dict[bytes, list[Change]] = {}
    for batch in batches:
        for key, value in zip(batch.keys, batch.values, strict=True):
            change = ("d", None, False) if batch.op == "delete" else ("c", value, batch.op == "ttl")
            changes.setdefault(key, []).append(change)
    return changes


def apply_batch(kv: RawKVClient, batch: Batch) -> None:
    if batch.op == "delete":
        kv.batch_delete(batch.keys)
    else:
        kv.batch_put(list(zip(batch.keys, batch.values, strict=True)), [3600] if batch.op == "ttl" else None)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def start_worker(file: Path) -> subprocess.Popen[bytes]:
    """``cdcflow run FILE`` in the background, its log in ``FILE.log`` (a pipe could fill and block it)."""
    with (file.parent / f"{file.name}.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "cdcflow.cli", "run", str(file)], cwd=REPO, stdout=log, stderr=log
        )


def stop_worker(process: subprocess.Popen[bytes], file: Path, kill: bool = False) -> str:
    """Stops a ``cdcflow run`` process (SIGKILL or SIGTERM) and returns its log so far."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return (file.parent / f"{file.name}.log").read_text(errors="replace")


@dataclass(frozen=True)
class Certificates:
    """PEM files made for one test run: a CA, a server certificate for 127.0.0.1 (``ca.pem``,
    ``server.pem``, ``server-key.pem``: a stand-in's ``--tls-dir``), a client certificate with
    common name ``cdcflow`` signed by the CA, and one signed by another CA (``rogue``)."""

    folder: Path

    def client(self) -> TLSConfig:
        return TLSConfig(ca=self.folder / "ca.pem", cert=self.folder / "client.pem", key=self.folder / "client-key.pem")

    def rogue(self) -> TLSConfig:
        return TLSConfig(ca=self.folder / "ca.pem", cert=self.folder / "rogue.pem", key=self.folder / "rogue-key.pem")

    def settings(self) -> dict[str, str]:
        """The client's ``tls`` setting of a pipeline file."""
        return {name: str(path) for name, path in self.client().model_dump().items()}


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _certificate("cdcflow test CA", None, None, is_ca=True)
    rogue_ca_key, rogue_ca = _certificate("another CA", None, None, is_ca=True)
    server_key, server = _certificate("tikv-standin", ca_key, ca, is_ca=False, server=True)
    client_key, client = _certificate("cdcflow", ca_key, ca, is_ca=False)
    rogue_key, rogue = _certificate("cdcflow", rogue_ca_key, rogue_ca, is_ca=False)
    _write(folder / "ca.pem", ca)
    for name, key, certificate in (
        ("server", server_key, server),
        ("client", client_key, client),
        ("rogue", rogue_key, rogue),
    ):
        _write(folder / f"{name}.pem", certificate)
        (folder / f"{name}-key.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return Certificates(folder)


def _certificate(
    common_name: str,
    issuer_key: ec.EllipticCurvePrivateKey | None,
    issuer: x509.Certificate | None,
    is_ca: bool,
    server: bool = False,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if server:  # the name the client dials must be in the certificate
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
    return key, builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def _write(path: Path, certificate: x509.Certificate) -> None:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
