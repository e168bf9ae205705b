"""The REST control plane every group worker serves, in Kafka Connect's vocabulary.

============================================  =====================================================
``GET /``                                     this worker: id, URL, group, coordinator
``GET /health``                               200 while the worker delivers, 503 otherwise
``GET /metrics``                              Prometheus text
``GET /workers``                              every live member, its URL and buckets
``GET /pipelines``                            the pipelines this group runs
``GET /pipelines/{name}/status``              per partition: owner, URL, offset, watermark, lag
``PUT /pipelines/{name}/pause``               every member stops reading (state kept in Kafka)
``PUT /pipelines/{name}/resume``              and goes on
``GET /pipelines/{name}/offsets``             the committed checkpoints
``PATCH /pipelines/{name}/offsets``           ``{"partitions": {id: offset}}``: set (paused only)
``DELETE /pipelines/{name}/offsets``          back to the start (``?partition=id``, repeatable;
                                              none: all), paused only; else 409, as KIP-875
``POST /pipelines/{name}/snapshots``          ``{"table": "ks.t", "where": "CQL"}``: a live
                                              snapshot, queued in every partition carrying
                                              the table (:mod:`cdcflow.live_snapshots`)
============================================  =====================================================

Served by faust's web server (aiohttp), over HTTPS with ``rest.tls``. Who may ask what is decided
before any handler runs, by :mod:`cdcflow.group.access`: with ``rest.auth`` a GET needs a viewer
and every other request an operator; ``GET /health`` is always open. The handlers run on the event
loop that also carries the faust coordinator's heartbeats, so anything that blocks goes to a thread.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cdcflow.errors import CdcflowError

__all__ = ["ControlPlane", "Reply", "register_routes"]


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: a status and a JSON body."""

    status: int
    body: Any


class ControlPlane(Protocol):
    """What the REST handlers ask of the worker (:class:`cdcflow.group.worker.GroupWorker`)."""

    def describe(self) -> Reply: ...
    def health(self) -> Reply: ...
    def metrics_text(self) -> bytes: ...
    def workers(self) -> Reply: ...
    def pipelines(self) -> Reply: ...
    def status(self, name: str) -> Reply: ...
    def pause(self, name: str, paused: bool) -> Reply: ...
    def offsets(self, name: str) -> Reply: ...
    def change_offsets(self, name: str, partitions: dict[str, dict[str, Any] | None] | None) -> Reply: ...
    def request_snapshot(self, name: str, table: str, where: str | None) -> Reply: ...


def _reply(call: Callable[[], Reply]) -> Reply:
    """The plane's answer; Kafka out of reach (or another cdcflow failure) is a 503 that says so."""
    try:
        return call()
    except CdcflowError as exc:
        return Reply(503, {"error": f"{type(exc).__name__}: {exc}"})


async def _blocking(call: Callable[..., Reply], *args: Any) -> Reply:
    """``call(*args)`` in a thread: it may wait on Kafka, which must not stall the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, _reply, functools.partial(call, *args))


async def _blocking_bytes(call: Callable[[], bytes]) -> bytes:
    return await asyncio.get_running_loop().run_in_executor(None, call)


def register_routes(app: Any, plane: ControlPlane) -> None:
    """Add the control plane's pages to a faust app (before it starts)."""
    import faust

    View = faust.web.View  # noqa: N806 - faust's class

    def answer(view: Any, reply: Reply) -> Any:
        return view.json(reply.body, status=reply.status)

    @app.page("/")
    class Root(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any) -> Any:
            return answer(self, plane.describe())

    @app.page("/health")
    class Health(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any) -> Any:
            return answer(self, plane.health())

    @app.page("/metrics")
    class Metrics(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any) -> Any:
            text = await _blocking_bytes(plane.metrics_text)
            return self.bytes(text, content_type="text/plain; version=0.0.4")

    @app.page("/workers")
    class Workers(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any) -> Any:
            return answer(self, plane.workers())

    @app.page("/pipelines")
    class Pipelines(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any) -> Any:
            return answer(self, plane.pipelines())

    @app.page("/pipelines/{name}/status")
    class Status(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any, name: str) -> Any:
            return answer(self, plane.status(name))

    @app.page("/pipelines/{name}/pause")
    class Pause(View):  # type: ignore[misc, valid-type]
        async def put(self, request: Any, name: str) -> Any:
            return answer(self, await _blocking(plane.pause, name, True))

    @app.page("/pipelines/{name}/resume")
    class Resume(View):  # type: ignore[misc, valid-type]
        async def put(self, request: Any, name: str) -> Any:
            return answer(self, await _blocking(plane.pause, name, False))

    @app.page("/pipelines/{name}/offsets")
    class Offsets(View):  # type: ignore[misc, valid-type]
        async def get(self, request: Any, name: str) -> Any:
            return answer(self, await _blocking(plane.offsets, name))

        async def patch(self, request: Any, name: str) -> Any:
            try:
                body = json.loads(await request.text())
                partitions = body["partitions"]
                if not isinstance(partitions, dict) or not all(isinstance(o, dict) for o in partitions.values()):
                    raise TypeError("partitions maps partition ids to offsets (objects)")
            except (ValueError, KeyError, TypeError) as exc:
                return answer(self, Reply(400, {"error": f'expected {{"partitions": {{id: offset}}}}: {exc}'}))
            return answer(
                self,
                await _blocking(plane.change_offsets, name, partitions),
            )

        async def delete(self, request: Any, name: str) -> Any:
            chosen = request.query.getall("partition", [])
            targets = dict.fromkeys(chosen) if chosen else None
            return answer(self, await _blocking(plane.change_offsets, name, targets))

    @app.page("/pipelines/{name}/snapshots")
    class Snapshots(View):  # type: ignore[misc, valid-type]
        async def post(self, request: Any, name: str) -> Any:
            try:
                body = json.loads(await request.text())
                table, where = body["table"], body.get("where")
                if not isinstance(table, str) or not (where is None or isinstance(where, str)):
                    raise TypeError("table is a text, where a text or null")
            except (ValueError, KeyError, TypeError) as exc:
                return answer(
                    self, Reply(400, {"error": f'expected {{"table": "keyspace.table", "where": ...}}: {exc}'})
                )
            return answer(self, await _blocking(plane.request_snapshot, name, table, where))
