"""Runs the built oracle against a cluster and exchanges operations with it, one at a time."""

from __future__ import annotations

import json
import select
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ClientGo", "OracleRunError"]


class OracleRunError(Exception):
    """The oracle exited, printed something that is not a JSON line, or did not answer in time."""


class ClientGo:
    """One ``tikv-client-go-oracle`` process: a client-go ``rawkv.Client`` on the cluster whose PD
    members are ``pd``, with the region cache it builds over its life. Keys and values are bytes
    here and hex on the wire; see main.go for the operations.

    Use :meth:`call` for an operation and its answer, or :meth:`send` then :meth:`answer` to change
    the cluster while the client works on it."""

    def __init__(self, binary: Path, pd: list[str], log: Path, timeout_s: float = 60.0) -> None:
        self._log = log.open("ab")
        self.timeout_s = timeout_s
        self.process = subprocess.Popen(
            [str(binary), "-pd", ",".join(pd), "-timeout", f"{timeout_s}s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        ready = self.answer(timeout_s + 30)
        if ready.get("ready") is not True:
            self.close()
            raise OracleRunError(f"the oracle's first line is {ready!r}, not ready")
        self.cluster_id = int(ready["cluster_id"])

    def send(self, op: str, **arguments: Any) -> None:
        """Sends one operation; bytes arguments (and lists of them) go as hex."""
        assert self.process.stdin is not None
        line = json.dumps({"op": op, **{name: _hex(value) for name, value in arguments.items()}})
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def has_answer(self, wait_s: float) -> bool:
        """Whether an answer is there to read within ``wait_s``."""
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], wait_s)
        return bool(readable)

    def answer(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The next answer line, decoded; OracleRunError if none comes in time."""
        assert self.process.stdout is not None
        if not self.has_answer(self.timeout_s + 30 if timeout_s is None else timeout_s):
            raise OracleRunError(f"no answer from the oracle in time (see {self._log.name})")
        line = self.process.stdout.readline()
        if not line:
            raise OracleRunError(f"the oracle exited {self.process.wait()} (see {self._log.name})")
        try:
            answer: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError as exc:
            raise OracleRunError(f"the oracle printed {line!r}, not JSON") from exc
        return answer

    def call(self, op: str, **arguments: Any) -> dict[str, Any]:
        """Runs one operation and returns its answer, which must be a success."""
        self.send(op, **arguments)
        answer = self.answer()
        if not answer["ok"]:
            raise OracleRunError(f"client-go's {op} failed: {answer['error']}")
        return answer

    # --- operations, in bytes ------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        return _unhex(self.call("get", key=key)["value"])

    def batch_get(self, keys: list[bytes]) -> list[bytes | None]:
        return [_unhex(v) for v in self.call("batch_get", keys=keys)["values"]]

    def scan(self, start: bytes, end: bytes, limit: int, key_only: bool = False) -> list[tuple[bytes, bytes]]:
        answer = self.call("scan", start=start, end=end, limit=limit, key_only=key_only)
        return [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in zip(answer["keys"], answer["values"], strict=True)]

    def ttl(self, key: bytes) -> int | None:
        ttl = self.call("ttl", key=key)["ttl"]
        return None if ttl is None else int(ttl)

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()

    def __enter__(self) -> ClientGo:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def _hex(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [_hex(item) for item in value]
    return value


def _unhex(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)
