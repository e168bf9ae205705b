"""A stand-in for a Confluent-compatible schema registry: the REST subset cdcflow's avro converter uses.

No Confluent-compatible registry can be started from Maven Central or PyPI here (Apicurio's app
jars on Maven Central are thin Quarkus jars whose dependencies are not all published there), so
the avro tests run against this server. It implements, per Confluent's documented API:

* ``POST /subjects/{subject}/versions`` ``{"schema": "<json>"}`` -> ``{"id": n}``; the same schema
  text gets the same id in every subject, a new one the next id;
* ``GET /schemas/ids/{id}`` -> ``{"schema": "<json>"}``;
* ``GET /subjects`` and ``GET /subjects/{subject}/versions``.

Schemas are checked to be Avro (fastavro parses them) and answered 422 otherwise, as Confluent does.
Run: ``python -m tests.standins.schema_registry --port 8081``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import fastavro

_VERSIONS = re.compile(r"^/subjects/([^/]+)/versions/?$")
_SCHEMA_BY_ID = re.compile(r"^/schemas/ids/(\d+)/?$")


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: dict[str, int] = {}
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}

    def register(self, subject: str, schema_text: str) -> int:
        canonical = json.dumps(json.loads(schema_text), sort_keys=True, separators=(",", ":"))
        with self.lock:
            schema_id = self.ids.get(canonical)
            if schema_id is None:
                schema_id = len(self.ids) + 1
                self.ids[canonical] = schema_id
                self.schemas[schema_id] = schema_text
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id


class _Handler(BaseHTTPRequestHandler):
    registry: _Registry

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        match = _VERSIONS.match(self.path)
        if match is None:
            self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
            return
        length = int(self.headers.get("Content-Length", "0"))
        try:
            schema_text = json.loads(self.rfile.read(length))["schema"]
            fastavro.parse_schema(json.loads(schema_text))
        except Exception as exc:
            self._answer(422, {"error_code": 42201, "message": f"Invalid schema: {exc}"})
            return
        self._answer(200, {"id": self.registry.register(match.group(1), schema_text)})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/subjects":
            self._answer(200, sorted(self.registry.subjects))
            return
        by_id = _SCHEMA_BY_ID.match(self.path)
        if by_id is not None:
            schema = self.registry.schemas.get(int(by_id.group(1)))
            if schema is None:
                self._answer(404, {"error_code": 40403, "message": "Schema not found"})
            else:
                self._answer(200, {"schema": schema})
            return
        versions = _VERSIONS.match(self.path)
        if versions is not None and versions.group(1) in self.registry.subjects:
            self._answer(200, list(range(1, len(self.registry.subjects[versions.group(1)]) + 1)))
            return
        self._answer(404, {"error_code": 40401, "message": "Subject not found"})


def serve(host: str, port: int) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"registry": _Registry()})
    return ThreadingHTTPServer((host, port), handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    serve(args.host, args.port).serve_forever()


if __name__ == "__main__":
    main()
