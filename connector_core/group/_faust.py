"""faust-streaming as the group coordinator, and faust's web server as the REST server.

faust runs in a thread of its own with its own event loop, so cdcflow's main thread keeps its
signal handling and its synchronous delivery loops. What faust does and does not do here:

* No agents and no tables: the app only subscribes to the assignment topic (the conductor
  subscribes to topics added to ``app.topics``), so it fetches nothing and commits nothing.
* ``table_standby_replicas=0``: faust then assigns with aiokafka's round-robin assignor, which
  never leaves a member with 0 buckets while there are enough buckets. With standby replicas
  faust's own assignor can (faust-streaming#93, when ceil(N/W) == ceil(N/(W-1))).
* faust awaits ``on_partitions_revoked`` receivers before the member rejoins: the receiver hands
  the revoke to the delivery loop in a thread and waits, while the loop keeps heartbeating.
* faust does not call revoke on shutdown: cdcflow stops its delivery loops (flush, final
  checkpoint, claims released) before it stops faust, which then leaves the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from cdcflow.errors import EngineUnavailableError
from cdcflow.group.config import GroupConfig
from cdcflow.group.coordinator import BucketListener, GroupCoordinator

__all__ = ["FaustCoordinator", "FaustRuntime", "build_app"]

log = logging.getLogger("cdcflow.group")

_START_TIMEOUT_S = 60.0


def build_app(
    config: GroupConfig, loop: asyncio.AbstractEventLoop, datadir: str, with_kafka: bool, broker_options: dict[str, Any]
) -> Any:
    """A faust app for the group: with Kafka (the faust coordinator) or web server only. Its web
    server serves the REST control plane as ``config.rest`` says: HTTPS, and who may ask what."""
    import faust
    from faust.app.base import BootStrategy

    from cdcflow.group.access import ControlPlaneAccess, access_middleware, server_ssl_context

    class WebOnly(BootStrategy):
        enable_kafka = False
        enable_web = True

    class WebOnlyApp(faust.App):
        BootStrategy = WebOnly

    app_class = faust.App if with_kafka else WebOnlyApp
    return app_class(
        config.id,
        broker=[f"kafka://{host.strip()}" for host in config.bootstrap_servers.split(",") if host.strip()],
        loop=loop,
        autodiscover=False,
        datadir=datadir,
        store="memory://",
        web_enabled=True,
        web_port=config.rest.port,
        web_bind=config.rest.bind,
        web_ssl_context=server_ssl_context(config.rest.tls) if config.rest.tls is not None else None,
        web_application_options={"middlewares": [access_middleware(ControlPlaneAccess(config.rest))]},
        canonical_url=config.rest.url(),
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=config.heartbeat_interval_s,
        broker_rebalance_timeout=config.rebalance_timeout_s,
        broker_request_timeout=max(90.0, config.session_timeout_s + 30.0),
        consumer_group_instance_id=config.instance_id,
        table_standby_replicas=0,
        topic_replication_factor=config.replication_factor,
        **broker_options,
    )


class FaustRuntime:
    """A faust app's worker in a thread with its own event loop. ``configure(loop)`` builds the
    app in that thread (faust objects belong to their loop)."""

    def __init__(self, configure: Callable[[asyncio.AbstractEventLoop, str], Any], name: str) -> None:
        self._configure = configure
        self._name = name
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._worker: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._datadir = tempfile.mkdtemp(prefix="cdcflow-faust-")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if not self._started.wait(_START_TIMEOUT_S) or self._failure is not None:
            raise EngineUnavailableError(f"faust did not start: {self._failure or 'no answer'}") from self._failure

    def _run(self) -> None:
        import faust

        class ThreadWorker(faust.Worker):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.spinner = None  # a terminal spinner belongs to faust's own command line

            def install_signal_handlers(self) -> None:
                pass  # signals belong to the main thread: cdcflow's own handlers stay in charge

            async def on_started(self) -> None:
                runtime._started.set()
                await super().on_started()

        runtime = self
        # Their INFO lines narrate every step of a rebalance (the app classes here log as this module).
        for name in ("faust", "mode", "aiokafka", __name__):
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            app = self._configure(loop, self._datadir)
            self._worker = ThreadWorker(
                app, loop=loop, quiet=True, override_logging=False, redirect_stdouts=False, loglevel="warning"
            )
            self._worker.execute_from_commandline()
        except SystemExit:
            pass  # how a faust worker ends
        except BaseException as exc:
            self._failure = exc
            log.error("faust stopped: %s: %s", type(exc).__name__, exc)
        finally:
            self._started.set()
            shutil.rmtree(self._datadir, ignore_errors=True)

    def call_soon(self, callback: Callable[[], Any]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback)

    def stop(self, timeout_s: float = 30.0) -> None:
        worker, loop = self._worker, self._loop
        if worker is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                asyncio.run_coroutine_threadsafe(worker.stop(), loop)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._failure is None


class FaustCoordinator(GroupCoordinator):
    """Bucket ownership from faust's rebalance signals (eager: revoke all, then assign)."""

    def __init__(
        self,
        config: GroupConfig,
        broker_options: dict[str, Any],
        add_routes: Callable[[Any], None],
        client_id: str,
    ) -> None:
        self.config = config
        # This member among the group's (cdcflow.group.membership).
        self._broker_options = {**broker_options, "broker_client_id": client_id}
        self._add_routes = add_routes
        self._owned: frozenset[int] = frozenset()
        self._runtime: FaustRuntime | None = None

    def start(self, listener: BucketListener) -> None:
        topic_name = self.config.bucket_topic

        def buckets(partitions: Any) -> frozenset[int]:
            return frozenset(tp.partition for tp in partitions if tp.topic == topic_name)

        def configure(loop: asyncio.AbstractEventLoop, datadir: str) -> Any:
            app = build_app(self.config, loop, datadir, with_kafka=True, broker_options=self._broker_options)
            # Subscribed, never consumed: the conductor subscribes to every topic in app.topics.
            app.topics.add(app.topic(topic_name, partitions=self.config.buckets))

            @app.on_partitions_revoked.connect  # type: ignore[untyped-decorator]
            async def revoked(sender: Any, revoked: Any, **_: Any) -> None:
                gone = buckets(revoked)
                if gone:
                    await loop.run_in_executor(None, listener.revoke, gone)
                self._owned = frozenset()

            @app.on_partitions_assigned.connect  # type: ignore[untyped-decorator]
            async def assigned(sender: Any, assigned: Any, **_: Any) -> None:
                got = buckets(assigned)
                self._owned = got
                if got:
                    listener.assign(got)

            self._add_routes(app)
            return app

        self._runtime = FaustRuntime(configure, "group-faust")
        self._runtime.start()

    def stop(self) -> None:
        if self._runtime is not None:
            self._runtime.stop()

    def owned(self) -> frozenset[int]:
        return self._owned

    def alive(self) -> bool:
        return self._runtime is not None and self._runtime.alive()
