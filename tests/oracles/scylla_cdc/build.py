"""Builds ``scylla-cdc-oracle`` (this folder's Rust program on scylla-cdc 0.7.0) once, cached by
the hash of its sources.

The crate hard-codes ScyllaDB's metadata tables, which a Cassandra node refuses to create
(``Cannot CREATE <all tables in system_distributed>``, ``system keyspace is not user-modifiable``),
and one ScyllaDB-only word of CQL. So the build, and only the build, rewrites exactly those strings
in a copy of the crate cargo downloaded from crates.io (:data:`REWRITES`; each must be found as
many times as listed, else the build stops), and builds a copy of the program with
``[patch.crates-io]`` pointing at it. Nothing of the crate is kept in this repository.

Where: ``$CDCFLOW_CACHE/oracles/scylla_cdc`` (``~/.cache/cdcflow`` by default): ``target/``
(cargo's, shared by every version, so a change of ``main.rs`` rebuilds one crate), and
``<hash>/`` with the patched crate, the package copy and the binary. A cold build compiles about
a hundred crates: about a minute on two cores.

Cargo fetches from crates.io only: every dependency is pinned by ``Cargo.lock`` (``--locked``),
and the build checks that every package it resolved comes from crates.io's index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.oracles._cache import build_lock, oracle_cache

__all__ = [
    "CRATE",
    "REWRITES",
    "OracleBuildError",
    "OracleUnavailableError",
    "Rewrite",
    "build_oracle",
    "find_cargo",
]

PACKAGE = Path(__file__).resolve().parent
BINARY = "scylla-cdc-oracle"
CRATE = ("scylla-cdc", "0.7.0")
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
_SOURCES = ("Cargo.toml", "Cargo.lock", "src/main.rs", "build.py")


class OracleUnavailableError(Exception):
    """This machine cannot build the oracle (no cargo): the test is skipped with this reason."""


class OracleBuildError(Exception):
    """cargo could not fetch or build the oracle, or the crate is not what the rewrites expect."""


@dataclass(frozen=True)
class Rewrite:
    """Replace ``old`` by ``new`` in ``path`` of the crate, which holds ``old`` exactly ``count`` times."""

    path: str
    old: str
    new: str
    count: int
    why: str


REWRITES: tuple[Rewrite, ...] = (
    # stream_generations.rs:123-124 and 289-290: the metadata tables, made unqualified so the
    # oracle finds them in the keyspace it is told to USE, where the stand-in writer wrote them.
    Rewrite(
        "src/stream_generations.rs",
        '"system_distributed.cdc_generation_timestamps"',
        '"cdc_generation_timestamps"',
        1,
        "vnode generations",
    ),
    Rewrite(
        "src/stream_generations.rs",
        '"system_distributed.cdc_streams_descriptions_v2"',
        '"cdc_streams_descriptions_v2"',
        1,
        "vnode streams",
    ),
    Rewrite("src/stream_generations.rs", '"system.cdc_timestamps"', '"cdc_timestamps"', 1, "tablet stream sets"),
    Rewrite("src/stream_generations.rs", '"system.cdc_streams"', '"cdc_streams"', 1, "tablet streams"),
    # log_reader.rs uses_tablets(): a keyspace uses tablets when ScyllaDB's
    # system_schema.scylla_keyspaces gives it initial_tablets; the test writes that row.
    Rewrite(
        "src/log_reader.rs",
        "FROM system_schema.scylla_keyspaces",
        "FROM scylla_keyspaces",
        1,
        "whether a keyspace uses tablets",
    ),
    # stream_reader.rs fetch_cdc(): BYPASS CACHE (ScyllaDB: do not fill the row cache with this
    # read) is not CQL to Cassandra (a syntax error); it changes no row read.
    Rewrite("src/stream_reader.rs", ' BYPASS CACHE"', '"', 1, "ScyllaDB-only read hint"),
)


def cache_root() -> Path:
    return oracle_cache("scylla_cdc")


def source_hash(cargo_version: str) -> str:
    digest = hashlib.sha256(cargo_version.encode())
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (PACKAGE / name).read_bytes())
    return digest.hexdigest()[:16]


def find_cargo() -> Path | None:
    """cargo on the PATH, else where rustup installs it (``$CARGO_HOME/bin``, ``~/.cargo/bin``: a
    shell that did not source rustup's profile, such as CI's, has it there and not on its PATH)."""
    found = shutil.which("cargo")
    if found is not None:
        return Path(found)
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    candidate = home / "bin" / "cargo"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def _cargo(arguments: Sequence[str], what: str) -> str:
    cargo = find_cargo()
    if cargo is None:
        raise OracleUnavailableError("no cargo on PATH nor in ~/.cargo/bin: the scylla-cdc oracle cannot be built")
    # rustc and the rest of the toolchain sit beside cargo
    environment = {**os.environ, "PATH": f"{cargo.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(cargo), *arguments], env=environment, capture_output=True, text=True, check=False, timeout=1800
    )
    if result.returncode != 0:
        raise OracleBuildError(f"{what}: cargo {' '.join(arguments)} exited {result.returncode}\n{result.stderr}")
    return result.stdout


def _downloaded_crate(manifest: Path) -> Path:
    """The crate's source as cargo unpacked it from crates.io (``cargo fetch`` verified it against
    Cargo.lock's checksum)."""
    _cargo(["fetch", "--locked", "--manifest-path", str(manifest)], "fetching the oracle's crates")
    metadata = json.loads(
        _cargo(
            ["metadata", "--format-version", "1", "--locked", "--offline", "--manifest-path", str(manifest)],
            "resolving the oracle's crates",
        )
    )
    for package in metadata["packages"]:
        if package["source"] is None:
            continue
        if package["source"] != CRATES_IO:
            raise OracleBuildError(f"{package['name']} {package['version']} comes from {package['source']}")
    for package in metadata["packages"]:
        if (package["name"], package["version"]) == CRATE:
            return Path(package["manifest_path"]).parent
    raise OracleBuildError(f"Cargo.lock resolves no {CRATE[0]} {CRATE[1]}")


def _rewrite(crate: Path) -> None:
    for rewrite in REWRITES:
        file = crate / rewrite.path
        text = file.read_text()
        found = text.count(rewrite.old)
        if found != rewrite.count:
            raise OracleBuildError(
                f"{CRATE[0]} {CRATE[1]} {rewrite.path} holds {rewrite.old!r} {found} times, not {rewrite.count} "
                f"({rewrite.why}): the rewrite no longer fits this crate"
            )
        file.write_text(text.replace(rewrite.old, rewrite.new))


def _patched_package(into: Path, crate: Path) -> Path:
    """A copy of this package whose Cargo.toml patches scylla-cdc with ``crate``."""
    package = into / "oracle"
    shutil.rmtree(package, ignore_errors=True)
    (package / "src").mkdir(parents=True)
    for name in ("Cargo.lock", "src/main.rs"):
        shutil.copy2(PACKAGE / name, package / name)
    manifest = (PACKAGE / "Cargo.toml").read_text()
    manifest += f'\n[patch.crates-io]\n{CRATE[0]} = {{ path = "{crate}" }}\n'
    (package / "Cargo.toml").write_text(manifest)
    return package


def _check_lock(package: Path) -> None:
    """After the build, the copy's lock names the same crates.io packages as ours, plus the patch."""
    ours = tomllib.loads((PACKAGE / "Cargo.lock").read_text())["package"]
    built = tomllib.loads((package / "Cargo.lock").read_text())["package"]
    expected = {(p["name"], p["version"], p.get("source")) for p in ours if p["name"] != CRATE[0]}
    found = {(p["name"], p["version"], p.get("source")) for p in built if p["name"] != CRATE[0]}
    if expected != found:
        raise OracleBuildError(f"the patched build resolved other crates: {sorted(expected ^ found)}")


def build_oracle() -> Path:
    """The oracle's binary, built now unless a build of the same sources is cached."""
    version = _cargo(["--version"], "asking cargo its version").strip()
    root = cache_root()
    build = root / source_hash(version)
    binary = build / BINARY
    with build_lock(root):
        if binary.exists():
            return binary
        crate = build / f"{CRATE[0]}-{CRATE[1]}"
        shutil.rmtree(crate, ignore_errors=True)
        build.mkdir(parents=True, exist_ok=True)
        shutil.copytree(_downloaded_crate(PACKAGE / "Cargo.toml"), crate)
        _rewrite(crate)
        package = _patched_package(build, crate)
        target = root / "target"
        _cargo(
            ["build", "--offline", "--manifest-path", str(package / "Cargo.toml"), "--target-dir", str(target)],
            "building the oracle",
        )
        _check_lock(package)
        shutil.copy2(target / "debug" / BINARY, binary.with_suffix(".tmp"))
        binary.with_suffix(".tmp").replace(binary)
    return binary
