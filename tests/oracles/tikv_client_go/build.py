"""Builds ``tikv-client-go-oracle`` (this folder's ``main.go`` on tikv/client-go v2.0.4) once,
cached by the hash of its sources and of the Go toolchain.

``go.mod`` pins ``github.com/tikv/client-go/v2 v2.0.4`` and ``go.sum`` the hash of every module it
resolves; the build runs with ``-mod=readonly``, so the go command fetches exactly those modules
from the Go module proxy, checks them against ``go.sum``, and never edits either file. Nothing of
client-go is kept in this repository.

Where: ``$CDCFLOW_CACHE/oracles/tikv_client_go`` (``~/.cache/cdcflow`` by default), ``<hash>/``
holding the binary; the modules stay in Go's own module cache (``go env GOMODCACHE``) and the
compiled packages in its build cache (``GOCACHE``), shared by every version of ``main.go``. A cold
build (no module fetched yet, empty build cache) downloads about 40 modules and compiles about 300
packages: docs/tikv.md gives the times measured on two cores.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.oracles._cache import build_lock, oracle_cache

__all__ = ["CLIENT_GO", "OracleBuildError", "OracleUnavailableError", "build_oracle", "find_go"]

PACKAGE = Path(__file__).resolve().parent
BINARY = "tikv-client-go-oracle"
CLIENT_GO = ("github.com/tikv/client-go/v2", "v2.0.4")
_SOURCES = ("go.mod", "go.sum", "main.go", "build.py")
# Where Go's own installer puts it (go.dev/doc/install); a shell that did not source a profile
# adding it to PATH, such as CI's, has it there and not on its PATH.
_GO_INSTALL_DIRS = (Path("/usr/local/go/bin"),)


class OracleUnavailableError(Exception):
    """This machine cannot build the oracle (no go): the test is skipped with this reason."""


class OracleBuildError(Exception):
    """go could not fetch or build the oracle, or go.mod no longer pins the client it should."""


def cache_root() -> Path:
    return oracle_cache("tikv_client_go")


def source_hash(go_version: str) -> str:
    digest = hashlib.sha256(go_version.encode())
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (PACKAGE / name).read_bytes())
    return digest.hexdigest()[:16]


def find_go() -> Path | None:
    """go on the PATH, else in ``$GOROOT/bin`` or ``/usr/local/go/bin``."""
    found = shutil.which("go")
    if found is not None:
        return Path(found)
    folders = [Path(os.environ["GOROOT"]) / "bin"] if os.environ.get("GOROOT") else []
    for folder in [*folders, *_GO_INSTALL_DIRS]:
        candidate = folder / "go"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _go(arguments: Sequence[str], what: str) -> str:
    go = find_go()
    if go is None:
        raise OracleUnavailableError(
            "no go on PATH, in $GOROOT/bin nor in /usr/local/go/bin: the tikv/client-go oracle cannot be built"
        )
    environment = {
        **os.environ,
        "PATH": f"{go.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # the toolchain found, never one the go command would download for a newer go line
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=readonly",
    }
    result = subprocess.run(
        [str(go), *arguments],
        cwd=PACKAGE,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if result.returncode != 0:
        raise OracleBuildError(f"{what}: go {' '.join(arguments)} exited {result.returncode}\n{result.stderr}")
    return result.stdout


def _check_pinned_client() -> None:
    """The build's module graph holds client-go at the pinned version, not one MVS raised."""
    path, version = CLIENT_GO
    resolved = _go(["list", "-m", "-f", "{{.Version}}", path], "resolving tikv/client-go").strip()
    if resolved != version:
        raise OracleBuildError(f"go.mod resolves {path} {resolved}, not {version}")


def build_oracle() -> Path:
    """The oracle's binary, built now unless a build of the same sources is cached."""
    version = _go(["version"], "asking go its version").strip()
    root = cache_root()
    build = root / source_hash(version)
    binary = build / BINARY
    with build_lock(root):
        if binary.exists():
            return binary
        build.mkdir(parents=True, exist_ok=True)
        _check_pinned_client()
        partial = binary.with_suffix(".tmp")
        _go(["build", "-trimpath", "-o", str(partial), "."], "fetching and building the oracle")
        partial.replace(binary)
    return binary
