"""Regenerates the protobuf modules (``*_pb2.py`` and ``*_pb2.pyi``) from the ``.proto`` files here.

The generated modules are committed, so installing cdcflow needs only the ``protobuf`` runtime;
``grpcio-tools`` (a dev dependency) is needed only to run this after editing a ``.proto``::

    python -m cdcflow.sources.tikv_client.proto.generate           # rewrite the modules
    python -m cdcflow.sources.tikv_client.proto.generate --check   # exit 1 if they are stale

Protos import each other by their installed path (``cdcflow/sources/tikv_client/proto/...``), so
the generated modules import each other as ``cdcflow.sources.tikv_client.proto.<name>_pb2``.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_PATH = Path("cdcflow/sources/tikv_client/proto")  # where the modules live once installed
PROTOS = ("metapb", "errorpb", "kvrpcpb", "pdpb", "cdcpb", "tikvpb")


def generate(out_dir: Path) -> None:
    """Writes the modules for every proto into ``out_dir``. The protos import each other by their
    installed path, so protoc reads them from a copy laid out as the package is installed."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / PACKAGE_PATH).mkdir(parents=True)
        for name in PROTOS:
            shutil.copy(HERE / f"{name}.proto", root / PACKAGE_PATH / f"{name}.proto")
        arguments = [
            "protoc",
            f"-I{root}",
            f"--python_out={root}",
            f"--pyi_out={root}",
            *(str(PACKAGE_PATH / f"{name}.proto") for name in PROTOS),
        ]
        if protoc.main(arguments) != 0:
            raise SystemExit(f"protoc failed on {', '.join(PROTOS)}")
        for generated in sorted((root / PACKAGE_PATH).glob("*_pb2.py*")):
            shutil.copy(generated, out_dir / generated.name)


def stale_modules() -> list[str]:
    """The generated files that differ from what the protos produce now."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch)
        generate(fresh)
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
    generate(HERE)


if __name__ == "__main__":
    main()
