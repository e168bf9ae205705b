"""The REST control plane's TLS, credentials and roles (issue 27, item 3), over real HTTPS.

Each server here is the one a group member serves (faust's web server, built by
``cdcflow.group._faust.build_app`` from ``engine.group.rest``, with the control plane's routes),
in this process and without Kafka: the control plane behind it is a recorder of what reached it.
Certificates are made by the test (two CAs: the group's, and a stranger's). The scenario with a
real group member on the real broker is ``test_worker_group.py::test_rest_api_with_tls_and_credentials``.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from cdcflow.cli import main
from cdcflow.config import load_pipeline
from cdcflow.errors import ConfigFieldError
from cdcflow.group._faust import FaustRuntime, build_app
from cdcflow.group.config import GroupConfig
from cdcflow.group.rest import Reply, register_routes
from cdcflow.plugins import PluginRegistry
from tests.integration.secure_kafka import make_certificates

VIEWER_PASSWORD = "Viewer-Pass-31"
OPERATOR_PASSWORD = "Operator-Pass-32"
VIEWER_TOKEN = "viewer-token-0123456789abcdef"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"


@dataclass
class RecordingPlane:
    """The control plane behind the server: what reached it, nothing else."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    def describe(self) -> Reply:
        return Reply(200, {"worker": "w"})

    def health(self) -> Reply:
        return Reply(200, {"status": "UP"})

    def metrics_text(self) -> bytes:
        return b"cdcflow_up 1\n"

    def workers(self) -> Reply:
        return Reply(200, {"workers": []})

    def pipelines(self) -> Reply:
        self.calls.append(("pipelines", None))
        return Reply(200, ["p"])

    def status(self, name: str) -> Reply:
        self.calls.append(("status", name))
        return Reply(200, {"pipeline": name, "partitions": {}})

    def pause(self, name: str, paused: bool) -> Reply:
        self.calls.append(("pause" if paused else "resume", name))
        return Reply(200, {"pipeline": name, "paused": paused})

    def offsets(self, name: str) -> Reply:
        return Reply(200, {"partitions": {}})

    def change_offsets(self, name: str, partitions: dict[str, dict[str, Any] | None] | None) -> Reply:
        self.calls.append(("offsets", partitions))
        return Reply(200, {"partitions": sorted(partitions or {})})


@dataclass
class Server:
    url: str
    plane: RecordingPlane
    tls: Path


@dataclass(frozen=True)
class Certificates:
    group: Path  # ca.pem, server.pem + server.key, client.pem + client.key
    stranger: Path  # the same, from another CA


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    group, stranger = tmp_path_factory.mktemp("group-tls"), tmp_path_factory.mktemp("stranger-tls")
    for folder in (group, stranger):
        make_certificates(folder)
        # broker.pem holds key, certificate and chain: the server's key goes in a file of its own.
        text = (folder / "broker.pem").read_text()
        end = "-----END PRIVATE KEY-----\n"
        (folder / "server.key").write_text(text[: text.index(end) + len(end)])
        (folder / "server.pem").write_text(text[text.index(end) + len(end) :])
    return Certificates(group, stranger)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve(rest: dict[str, Any], tls: Path) -> Iterator[Server]:
    port = free_port()
    config = GroupConfig.model_validate({"bootstrap_servers": "127.0.0.1:1", "id": "g", "rest": {"port": port, **rest}})
    plane = RecordingPlane()

    def configure(loop: Any, datadir: str) -> Any:
        app = build_app(config, loop, datadir, with_kafka=False, broker_options={})
        register_routes(app, plane)
        return app

    runtime = FaustRuntime(configure, "rest-under-test")
    runtime.start()
    try:
        yield Server(f"https://127.0.0.1:{port}", plane, tls)
    finally:
        runtime.stop()


@pytest.fixture(scope="module")
def with_credentials(certificates: Certificates) -> Iterator[Server]:
    """HTTPS (key in a file of its own), two users and two tokens."""
    tls = certificates.group
    rest = {
        "tls": {"certfile": str(tls / "server.pem"), "keyfile": str(tls / "server.key")},
        "auth": {
            "users": {
                "ann": {"password": VIEWER_PASSWORD, "role": "viewer"},
                "ops": {"password": OPERATOR_PASSWORD, "role": "operator"},
            },
            "tokens": {
                "dashboard": {"token": VIEWER_TOKEN},  # viewer by default
                "ci": {"token": OPERATOR_TOKEN, "role": "operator"},
            },
        },
    }
    yield from serve(rest, tls)


@pytest.fixture(scope="module")
def with_client_certificates(certificates: Certificates) -> Iterator[Server]:
    """Mutual TLS alone (certificate and key in one file): a client certificate is the credential."""
    tls = certificates.group
    yield from serve({"tls": {"certfile": str(tls / "broker.pem"), "client_ca": str(tls / "ca.pem")}}, tls)


def call(server: Server, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, server.url + path, verify=str(server.tls / "ca.pem"), timeout=30, **kwargs)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_without_credentials_only_health_answers(with_credentials: Server) -> None:
    assert call(with_credentials, "GET", "/health").json() == {"status": "UP"}
    for method, path in [
        ("GET", "/pipelines"),
        ("GET", "/metrics"),
        ("GET", "/"),
        ("GET", "/router/"),  # faust's own pages are guarded too
        ("PUT", "/pipelines/p/pause"),
        ("DELETE", "/pipelines/p/offsets"),
    ]:
        refused = call(with_credentials, method, path)
        assert refused.status_code == 401, (method, path, refused.text)
        assert refused.headers["WWW-Authenticate"].startswith("Basic realm=")
    assert with_credentials.plane.calls == []


def test_wrong_credentials_are_refused(with_credentials: Server) -> None:
    before = len(with_credentials.plane.calls)
    wrong = [
        {"auth": ("ann", OPERATOR_PASSWORD)},  # another user's password
        {"auth": ("ann", VIEWER_PASSWORD + "x")},
        {"auth": ("nobody", VIEWER_PASSWORD)},
        {"auth": ("ann", "")},
        {"headers": bearer(VIEWER_TOKEN[:-1])},
        {"headers": bearer(VIEWER_PASSWORD)},  # a password is not a token
        {"headers": {"Authorization": "Basic not-base64!"}},
        {"headers": {"Authorization": "Basic " + base64.b64encode(b"ann" + VIEWER_PASSWORD.encode()).decode()}},
        {"headers": {"Authorization": VIEWER_TOKEN}},  # no scheme
    ]
    for credentials in wrong:
        refused = call(with_credentials, "GET", "/pipelines", **credentials)
        assert refused.status_code == 401, (credentials, refused.text)
        assert "wrong credentials" in refused.json()["error"]
    assert len(with_credentials.plane.calls) == before


def test_a_viewer_reads_and_an_operator_changes(with_credentials: Server) -> None:
    plane = with_credentials.plane
    for viewer in ({"auth": ("ann", VIEWER_PASSWORD)}, {"headers": bearer(VIEWER_TOKEN)}):
        assert call(with_credentials, "GET", "/pipelines", **viewer).json() == ["p"]
        assert call(with_credentials, "GET", "/pipelines/p/status", **viewer).status_code == 200
        assert call(with_credentials, "GET", "/metrics", **viewer).text == "cdcflow_up 1\n"
        calls = len(plane.calls)
        for method, path in [("PUT", "/pipelines/p/pause"), ("PUT", "/pipelines/p/resume")]:
            forbidden = call(with_credentials, method, path, **viewer)
            assert forbidden.status_code == 403, forbidden.text
            assert "needs the operator role" in forbidden.json()["error"]
        forbidden = call(with_credentials, "PATCH", "/pipelines/p/offsets", json={"partitions": {"a": {}}}, **viewer)
        assert forbidden.status_code == 403
        assert len(plane.calls) == calls  # nothing reached the plane
    paused = call(with_credentials, "PUT", "/pipelines/p/pause", auth=("ops", OPERATOR_PASSWORD))
    assert paused.status_code == 200 and plane.calls[-1] == ("pause", "p")
    changed = call(
        with_credentials,
        "PATCH",
        "/pipelines/p/offsets",
        json={"partitions": {"a": {"seq": 1}}},
        headers=bearer(OPERATOR_TOKEN),
    )
    assert changed.status_code == 200 and plane.calls[-1] == ("offsets", {"a": {"seq": 1}})
    assert call(with_credentials, "DELETE", "/pipelines/p/offsets?partition=a", headers=bearer(OPERATOR_TOKEN)).ok


def test_plain_http_and_an_unknown_ca_get_no_answer(with_credentials: Server, certificates: Certificates) -> None:
    with pytest.raises(requests.ConnectionError):
        requests.get(with_credentials.url.replace("https://", "http://") + "/health", timeout=10)
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(with_credentials.url + "/health", verify=str(certificates.stranger / "ca.pem"), timeout=10)


def test_the_cli_takes_user_token_and_cacert(
    with_credentials: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = with_credentials.url, str(with_credentials.tls / "ca.pem")
    plane = with_credentials.plane
    monkeypatch.delenv("CDCFLOW_REST_TOKEN", raising=False)
    monkeypatch.delenv("CDCFLOW_REST_PASSWORD", raising=False)

    assert main(["status", "p", "--url", url, "--cacert", ca]) == 1
    err = capsys.readouterr().err
    assert f"GET {url}/pipelines/p/status: 401: no credentials" in err and "--user" in err

    assert main(["status", "p", "--url", url, "--cacert", ca, "--user", "ann"]) == 1
    assert "--user ann: no password: set $CDCFLOW_REST_PASSWORD" in capsys.readouterr().err

    monkeypatch.setenv("CDCFLOW_REST_PASSWORD", VIEWER_PASSWORD)
    assert main(["status", "p", "--url", url, "--cacert", ca, "--user", "ann"]) == 0
    assert '"pipeline": "p"' in capsys.readouterr().out
    assert main(["pause", "p", "--url", url, "--cacert", ca, "--user", "ann"]) == 1
    assert f"PUT {url}/pipelines/p/pause: 403: ann is a viewer" in capsys.readouterr().err

    calls = len(plane.calls)
    assert main(["pause", "p", "--url", url, "--cacert", ca, "--token", OPERATOR_TOKEN]) == 0
    assert plane.calls[calls:] == [("pause", "p")]
    monkeypatch.setenv("CDCFLOW_REST_TOKEN", OPERATOR_TOKEN)
    assert main(["resume", "p", "--url", url, "--cacert", ca]) == 0
    assert plane.calls[-1] == ("resume", "p")
    assert main(["offsets", "reset", "p", "--partition", "a", "--url", url, "--cacert", ca]) == 0
    assert plane.calls[-1] == ("offsets", {"a": None})

    assert main(["workers", "--url", url]) == 1  # the group's CA is not the system's
    assert "over TLS" in capsys.readouterr().err
    out_and_err = "".join(capsys.readouterr())
    assert OPERATOR_TOKEN not in out_and_err and VIEWER_PASSWORD not in out_and_err


def test_client_certificates_of_the_group_ca_are_required(
    with_client_certificates: Server, certificates: Certificates, capsys: pytest.CaptureFixture[str]
) -> None:
    server, group, stranger = with_client_certificates, certificates.group, certificates.stranger
    assert call(server, "GET", "/health").status_code == 200  # probes have no certificate
    refused = call(server, "GET", "/pipelines")
    assert refused.status_code == 401 and "client certificate" in refused.json()["error"]
    assert call(server, "PUT", "/pipelines/p/pause").status_code == 401
    assert server.plane.calls == []
    mine = (str(group / "client.pem"), str(group / "client.key"))
    assert call(server, "GET", "/pipelines", cert=mine).json() == ["p"]
    assert call(server, "PUT", "/pipelines/p/pause", cert=mine).status_code == 200  # no auth: a certificate suffices
    assert server.plane.calls[-1] == ("pause", "p")
    # Refused in the handshake (with TLS 1.3 the client learns it as the connection closing).
    calls = len(server.plane.calls)
    with pytest.raises(requests.ConnectionError):
        call(server, "GET", "/pipelines", cert=(str(stranger / "client.pem"), str(stranger / "client.key")))
    assert len(server.plane.calls) == calls

    ca = str(group / "ca.pem")
    assert main(["status", "p", "--url", server.url, "--cacert", ca]) == 1
    assert "401: a client certificate" in capsys.readouterr().err
    assert main(["status", "p", "--url", server.url, "--cacert", ca, "--cert", mine[0], "--key", mine[1]]) == 0


def group_pipeline(tmp_path: Path, rest: str) -> Path:
    file = tmp_path / "group.yaml"
    file.write_text(
        "name: p\nsource: {type: datagen, count: 10}\nsink: {type: file, path: out.jsonl}\n"
        "checkpoint: {type: kafka, bootstrap_servers: 'b:1'}\n"
        f"engine:\n  group:\n    bootstrap_servers: 'b:1'\n    rest:\n{rest}"
    )
    return file


def test_rest_security_settings_are_checked_by_validate(tmp_path: Path, certificates: Certificates) -> None:
    registry = PluginRegistry.from_entry_points()
    (tmp_path / "ann-password").write_text("File-Secret-Pass-33\n")
    good = group_pipeline(
        tmp_path,
        f"      tls: {{certfile: {certificates.group / 'server.pem'}, keyfile: {certificates.group / 'server.key'}}}\n"
        "      auth: {users: {ann: {password: '${file:ann-password}'}}}\n",
    )
    spec = load_pipeline(good, registry, environ={})
    assert spec.group is not None and spec.group.rest.auth is not None
    ann = spec.group.rest.auth.users["ann"]
    assert ann.password.get_secret_value() == "File-Secret-Pass-33" and ann.role == "viewer"
    assert spec.group.rest.url().startswith("https://")

    bad = group_pipeline(
        tmp_path,
        "      tls: {certfile: no-such.pem}\n"
        "      auth:\n"
        "        users: {ann: {password: '${file:ann-password}', role: operater}}\n"
        "        tokens: {ci: {token: Tok-9-chars}}\n",
    )
    with pytest.raises(ConfigFieldError) as caught:
        load_pipeline(bad, registry, environ={})
    lines = str(caught.value).splitlines()
    assert lines[0].startswith(
        f"{bad}: line 9: field engine.group.rest.tls: rest.tls: cannot use certfile {tmp_path / 'no-such.pem'}"
    )
    assert lines[1] == (
        f"{bad}: line 11: field engine.group.rest.auth.users.ann.role: expected 'viewer' or 'operator', "
        "found 'operater'; did you mean 'operator'?"
    )
    assert lines[2] == (
        f"{bad}: line 12: field engine.group.rest.auth.tokens.ci.token: a token has at least 16 characters "
        "(a short one is soon guessed) (found a secret (not shown))"
    )
    assert "Tok-9" not in lines[2] and "File-Secret" not in str(caught.value)
    nobody = group_pipeline(tmp_path, "      auth: {}\n")
    with pytest.raises(ConfigFieldError, match="auth lets no one in"):
        load_pipeline(nobody, registry, environ={})
