"""Regenerates the protobuf modules (``*_pb2.py`` and ``*_pb2.pyi``) from the ``.proto`` files here.

The generated modules are committed, so installing cdcflow needs only the ``protobuf`` runtime;
``grpcio-tools`` (a dev dependency) is needed only to run this after editing a ``.proto``::

    python -m sources.tikv_rawkv.client.proto.generate           # rewrite the modules
    python -m sources.tikv_rawkv.client.proto.generate --check   # exit 1 if they are stale

Protos import each other by their path from the repository root, so the generated modules import
each other as ``sources.tikv_rawkv.client.proto.<name>_pb2``.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
PROTOS = ("metapb", "errorpb", "kvrpcpb", "pdpb", "cdcpb", "tikvpb")


def generate(out_dir: Path) -> None:
    """Writes the modules for every proto under ``out_dir`` (mirroring the repository layout)."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    relative = HERE.relative_to(REPO)
    arguments = [
        "protoc",
        f"-I{REPO}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *(str(relative / f"{name}.proto") for name in PROTOS),
    ]
    if protoc.main(arguments) != 0:
        raise SystemExit(f"protoc failed on {', '.join(PROTOS)}")


def stale_modules() -> list[str]:
    """The generated files that differ from what the protos produce now."""
    with tempfile.TemporaryDirectory() as scratch:
        generate(Path(scratch))
        fresh = Path(scratch) / HERE.relative_to(REPO)
        return [
            path.name
            for path in sorted(fresh.iterdir())
            if not (HERE / path.name).exists() or not filecmp.cmp(path, HERE / path.name, shallow=False)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed modules are stale")
    if parser.parse_args().check:
        stale = stale_modules()
        if stale:
            sys.exit(f"stale generated modules: {', '.join(stale)}; run python -m {__spec__.name}")
        return
    generate(REPO)


if __name__ == "__main__":
    main()
