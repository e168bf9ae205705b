"""Starting the stand-in in a subprocess and driving it from tests."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[3]


class StandinCommandError(AssertionError):
    """The stand-in refused a control command."""


@dataclass
class StandinCluster:
    """A running stand-in: its PD address, store addresses and the control channel."""

    pd: str  # the first PD member, PD's leader at start
    stores: dict[int, str]
    control: str  # the test control service, never behind TLS
    pd_members: list[str] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    _channel: grpc.Channel | None = field(default=None, repr=False)

    @classmethod
    def start(cls, stores: int = 3, resolved_ts_interval_s: float = 1.0, **options: object) -> StandinCluster:
        """Starts ``python -m tests.standins.tikv``; ``options`` are its other flags by name
        (``cluster_id=8`` is ``--cluster-id 8``)."""
        flags = [
            item
            for name, value in options.items()
            for single in (value if isinstance(value, list | tuple) else [value])
            for item in (f"--{name.replace('_', '-')}", str(single))
        ]
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.standins.tikv",
                "--stores",
                str(stores),
                "--resolved-ts-interval",
                str(resolved_ts_interval_s),
                *flags,
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            process.kill()
            raise RuntimeError("the TiKV stand-in exited before printing its ports")
        ports = json.loads(line)
        return cls(
            ports["pd"],
            {int(k): v for k, v in ports["stores"].items()},
            ports["control"],
            ports["pd_members"],
            process,
        )

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self.process is not None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def call(self, command: str, **args: Any) -> Any:
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                self.control, options=[("grpc.max_receive_message_length", 512 << 20)]
            )
        stub = self._channel.unary_unary(
            "/cdcflow.standin.Control/Call",
            request_serializer=lambda d: json.dumps(d).encode(),
            response_deserializer=json.loads,
        )
        answer = stub({"command": command, **args}, timeout=120)
        if "error" in answer:
            raise StandinCommandError(f"{command}: {answer['error']}")
        return answer["result"]
