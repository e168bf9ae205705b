"""One member of a worker group: its pipelines, its coordinator, its control plane.

``cdcflow run pipeline.yaml`` with ``engine.group`` runs this on every machine, with the same
file. Threads of the process:

* one delivery loop per pipeline (:class:`GroupPipelineRunner`);
* the coordinator (faust's event loop, or a confluent-kafka poll loop), which turns the group's
  rebalances into assign / revoke / lose requests for the delivery loops;
* the control topic's reader (pause flags, offsets commands, other workers' status);
* faust's web server for the REST API (the faust coordinator's own; a web-only faust app with
  the ``kafka`` coordinator);
* the main thread, which keeps cdcflow's signal handling and publishes this worker's status.

On SIGTERM the delivery loops stop (finish the read, flush, commit, release their claims) before
the coordinator leaves the group, so the buckets move with zero duplicates.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import generate_latest

from cdcflow.config import PipelineSpec
from cdcflow.contract import Checkpoint, CheckpointStore, PluginContext
from cdcflow.errors import (
    CdcflowError,
    ConfigError,
    EngineUnavailableError,
    GroupUnavailableError,
    SnapshotRequestError,
)
from cdcflow.group.access import exposure_warnings
from cdcflow.group.config import GroupConfig
from cdcflow.group.control import ControlChannel, OffsetsCommand, SnapshotCommand
from cdcflow.group.coordinator import GroupCoordinator, wait_or_exit
from cdcflow.group.membership import MembershipWatch, member_client_id
from cdcflow.group.rest import Reply, register_routes
from cdcflow.group.runner import GroupPipelineRunner, OwnershipChange
from cdcflow.group.topics import ensure_topic
from cdcflow.live_snapshots import LiveSnapshotSource, SnapshotRequest
from cdcflow.metrics import METRICS_REGISTRY
from cdcflow.pipeline import BucketAssignment, build_runner
from cdcflow.processes import install_stop_handlers, tune_for_the_loop
from cdcflow.retry import Backoff

if TYPE_CHECKING:
    from cdcflow.plugins import PluginRegistry

__all__ = ["GroupWorker", "group_of", "run_group_worker", "running_members"]

log = logging.getLogger("cdcflow.group")

_OFFSETS_ANSWER_TIMEOUT_S = 30.0
_PAUSE_CONFIRM_TIMEOUT_S = 15.0


def group_of(specs: Sequence[PipelineSpec]) -> GroupConfig | None:
    """The one group these pipelines run in, or None. One process is one member of one group."""
    groups = {spec.file: spec.group for spec in specs}
    if all(g is None for g in groups.values()):
        return None
    distinct = {g.model_dump_json() if g is not None else "none" for g in groups.values()}
    if len(distinct) > 1:
        raise ConfigError(
            "these pipeline files name different worker groups (engine.group), or some none: one `cdcflow run` "
            "is one member of one group; run the others in separate commands: "
            + ", ".join(f"{file}: {g.id if g is not None else 'no group'}" for file, g in groups.items())
        )
    return next(g for g in groups.values() if g is not None)


def run_group_worker(specs: Sequence[PipelineSpec], factory: PluginRegistry, rest_port: int | None = None) -> int:
    group = group_of(specs)
    assert group is not None, "run_group_worker needs pipelines with engine.group"
    if rest_port is not None:
        group = group.model_copy(update={"rest": group.rest.model_copy(update={"port": rest_port})})
    return GroupWorker(specs, factory, group).run()


def kafka_settings(config: GroupConfig, extra: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings of the group's own clients (coordinator, control topic, admin)."""
    return config.kafka.librdkafka_settings(config.bootstrap_servers, extra)


def running_members(config: GroupConfig) -> list[str]:
    """The members the group's consumer group has now (client host of each)."""
    admin = AdminClient(kafka_settings(config, {}))
    try:
        described = admin.describe_consumer_groups([config.id], request_timeout=30)[config.id].result()
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []
        raise EngineUnavailableError(f"cannot describe consumer group {config.id}: {exc}") from exc
    return sorted(f"{m.client_id}@{m.host}" for m in described.members)


def faust_broker_options(config: GroupConfig) -> dict[str, Any]:
    """faust (aiokafka) settings for the connection :func:`kafka_settings` describes: the same
    ``kafka`` block, as faust's credentials and an SSL context."""
    import ssl

    import faust

    block = config.kafka
    options: dict[str, Any] = {"broker_client_id": block.client_id}
    context = None
    if block.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(
            cafile=str(block.ssl_ca_location) if block.ssl_ca_location is not None else None
        )
        if block.ssl_certificate_location is not None and block.ssl_key_location is not None:
            password = block.ssl_key_password.get_secret_value() if block.ssl_key_password is not None else None
            context.load_cert_chain(str(block.ssl_certificate_location), str(block.ssl_key_location), password)
        if not block.ssl_endpoint_identification:
            context.check_hostname = False
    if block.security_protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        assert block.sasl_username is not None and block.sasl_password is not None  # checked by the model
        options["broker_credentials"] = faust.SASLCredentials(
            username=block.sasl_username,
            password=block.sasl_password.get_secret_value(),
            mechanism=block.sasl_mechanism,
            ssl_context=context,
        )
    elif context is not None:
        options["broker_credentials"] = faust.SSLCredentials(context)
    return options


class _Listener:
    """Fans the coordinator's changes out to every pipeline's loop, and waits where it must."""

    def __init__(self, worker: GroupWorker) -> None:
        self.worker = worker

    def _tell(self, kind: OwnershipChange, buckets: frozenset[int]) -> list[threading.Event]:
        log.info("group %s: %s buckets %s", self.worker.config.id, kind, sorted(buckets))
        return [runner.request(kind, buckets) for runner in self.worker.runners.values()]

    def assign(self, buckets: frozenset[int]) -> None:
        self._tell("assign", buckets)

    def revoke(self, buckets: frozenset[int]) -> None:
        wait_or_exit(
            self._tell("revoke", buckets), 0.9 * self.worker.config.rebalance_timeout_s, f"revoking {sorted(buckets)}"
        )

    def lose(self, buckets: frozenset[int]) -> None:
        wait_or_exit(
            self._tell("lose", buckets), 0.9 * self.worker.config.rebalance_timeout_s, f"dropping {sorted(buckets)}"
        )


class GroupWorker:
    """This process's membership: build, run, answer the REST API, leave."""

    def __init__(self, specs: Sequence[PipelineSpec], factory: PluginRegistry, config: GroupConfig) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self.factory = factory
        self.config = config
        self.worker_id = config.instance_id or f"{socket.gethostname()}:{config.rest.port}"
        self.url = config.rest.url()
        self.stop = threading.Event()
        self.control = ControlChannel(config, self._settings)
        self.runners: dict[str, GroupPipelineRunner] = {}
        self.coordinator: GroupCoordinator | None = None
        self._web: Any = None
        self._threads: dict[str, threading.Thread] = {}
        self._failures: dict[str, BaseException] = {}
        self._report_now = threading.Event()
        self._stores: dict[str, CheckpointStore[Any]] = {}
        self._stores_lock = threading.Lock()
        self._started_at = time.time()
        self.membership_client_id = member_client_id(config, self.worker_id)
        # Whether the group still counts this worker in: its delivery loops write only while it does.
        self._membership = MembershipWatch(config, self.membership_client_id, self._settings, self._expelled)

    def _settings(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        return kafka_settings(self.config, extra)

    # --- running -------------------------------------------------------------------------------

    def run(self) -> int:
        tune_for_the_loop()
        if threading.current_thread() is threading.main_thread():
            install_stop_handlers(self.stop, max(spec.engine.shutdown_timeout_s for spec in self.specs.values()))
        some_spec = next(iter(self.specs.values()))
        self.config.kafka.check_reachable(
            self.config.bootstrap_servers, some_spec.engine.startup_timeout_s, "engine.group"
        )
        if not self._with_backoff("reaching the group's Kafka", self._prepare_topics):
            return 0  # stopped while waiting for Kafka
        for spec in self.specs.values():
            runner = build_runner(
                spec,
                self.factory,
                BucketAssignment(self.config.buckets),
                self.stop,
                worker_id=self.worker_id,
                runner_class=GroupPipelineRunner,
                control=self.control,
                member_id=self.worker_id,
                membership=self._membership,
            )
            assert isinstance(runner, GroupPipelineRunner)
            runner.on_report = self._report_now.set
            self.runners[spec.name] = runner
        self.control.on_command = self._route_command
        self.control.on_snapshot = self._route_command
        self.control.on_partitions = self._partitions_announced
        self.control.on_pause = self._pause_changed
        for name, runner in self.runners.items():
            thread = threading.Thread(target=self._run_pipeline, args=(name, runner), name=f"pipeline-{name}")
            self._threads[name] = thread
            thread.start()
        for warning in exposure_warnings(self.config.rest):
            log.warning("group %s: %s", self.config.id, warning)
        try:
            self.coordinator = self._start_coordinator()
            log.info(
                "worker %s joined group %s (%s coordinator, %d buckets), REST at %s",
                self.worker_id,
                self.config.id,
                self.config.coordinator,
                self.config.buckets,
                self.url,
            )
            self._publish_until_done()
        except BaseException:
            self.stop.set()
            raise
        finally:
            for thread in self._threads.values():
                thread.join()
            self._leave()
        return 1 if self._failures else 0

    def _prepare_topics(self) -> None:
        ensure_topic(
            self._settings({}),
            self.config.bucket_topic,
            self.config.buckets,
            self.config.replication_factor,
            exact=True,
        )
        self.control.start()

    def _with_backoff(self, what: str, action: Callable[[], None]) -> bool:
        """Run ``action`` until it succeeds, waiting out a Kafka that is down as the pipelines'
        ``errors.retry`` says; False if stopped meanwhile."""
        backoff = Backoff(next(iter(self.specs.values())).errors.retry)
        while not self.stop.is_set():
            try:
                action()
                return True
            except GroupUnavailableError as exc:
                delay = backoff.next_delay(f"group {self.config.id}: {what}", exc)
                log.warning("%s failed (%s); retrying in %.1f s", what, exc, delay)
                self.stop.wait(delay)
        return False

    def _start_coordinator(self) -> GroupCoordinator:
        from cdcflow.group._faust import FaustCoordinator, FaustRuntime, build_app

        listener = _Listener(self)
        client_id = self.membership_client_id
        coordinator: GroupCoordinator
        if self.config.coordinator == "faust":
            coordinator = FaustCoordinator(
                self.config, faust_broker_options(self.config), lambda app: register_routes(app, self), client_id
            )
        else:
            from cdcflow.group._kafka import KafkaCoordinator

            self._web = FaustRuntime(
                lambda loop, datadir: self._with_routes(
                    build_app(self.config, loop, datadir, with_kafka=False, broker_options={})
                ),
                "group-rest",
            )
            self._web.start()
            coordinator = KafkaCoordinator(self.config, self._settings, client_id)
        coordinator.start(listener)
        self._membership.start()
        return coordinator

    def _expelled(self) -> None:
        """The group no longer lists this worker: every bucket it held is someone else's now."""
        everything = frozenset(range(self.config.buckets))
        for runner in self.runners.values():
            runner.request("lose", everything)

    def _with_routes(self, app: Any) -> Any:
        register_routes(app, self)
        return app

    def _run_pipeline(self, name: str, runner: GroupPipelineRunner) -> None:
        try:
            runner.run()
            log.info("pipeline %s finished", name)
        except BaseException as exc:
            expected = isinstance(exc, CdcflowError)
            log.error("pipeline %s failed: %s: %s", name, type(exc).__name__, exc, exc_info=None if expected else exc)
            self._failures[name] = exc
            self.stop.set()  # one failed pipeline stops the worker; the group gives its buckets to others
        finally:
            self._report_now.set()

    def _publish_until_done(self) -> None:
        next_report = 0.0
        while any(thread.is_alive() for thread in self._threads.values()):
            if self.coordinator is not None and not self.coordinator.alive() and not self.stop.is_set():
                log.error("group %s: the coordinator stopped; stopping this worker", self.config.id)
                self.stop.set()
            if self._report_now.is_set() or time.monotonic() >= next_report:
                self._report_now.clear()
                next_report = time.monotonic() + self.config.status_interval_s
                self._publish_status()
            self._report_now.wait(0.2)

    def _leave(self) -> None:
        self._membership.stop()
        if self.coordinator is not None:
            self.coordinator.stop()
        try:
            self.control.publish_status(self.worker_id, None)
        except CdcflowError as exc:
            log.warning("could not remove this worker's status: %s", exc)
        if self._web is not None:
            self._web.stop()
        self.control.close()
        with self._stores_lock:
            for store in self._stores.values():
                store.close()
        log.info("worker %s left group %s", self.worker_id, self.config.id)

    def _publish_status(self) -> None:
        try:
            self.control.publish_status(self.worker_id, self._status())
        except CdcflowError as exc:
            log.warning("could not publish this worker's status: %s", exc)

    def _status(self) -> dict[str, Any]:
        return {
            "worker": self.worker_id,
            "url": self.url,
            "coordinator": self.config.coordinator,
            "buckets": sorted(self.coordinator.owned()) if self.coordinator is not None else [],
            "pipelines": {name: runner.snapshot for name, runner in self.runners.items()},
            "at": time.time(),
        }

    # --- control topic events ------------------------------------------------------------------

    def _route_command(self, command: OffsetsCommand | SnapshotCommand) -> None:
        runner = self.runners.get(command.pipeline)
        if runner is not None:
            runner.offsets_command(command)

    def _partitions_announced(self, pipeline: str, ids: list[str]) -> None:
        runner = self.runners.get(pipeline)
        if runner is not None and frozenset(ids) != runner.listed_partition_ids:
            runner.refresh_soon()

    def _pause_changed(self, pipeline: str) -> None:
        runner = self.runners.get(pipeline)
        if runner is not None:
            runner.report_soon()

    # --- the REST API (cdcflow.group.rest.ControlPlane) ------------------------------------------

    def describe(self) -> Reply:
        return Reply(
            200,
            {
                "worker": self.worker_id,
                "url": self.url,
                "group": self.config.id,
                "coordinator": self.config.coordinator,
                "buckets": self.config.buckets,
                "pipelines": sorted(self.specs),
            },
        )

    def health(self) -> Reply:
        problems = []
        if self.stop.is_set():
            problems.append("stopping")
        if self.coordinator is None or not self.coordinator.alive():
            problems.append("not in the group")
        problems += [f"pipeline {name} failed: {exc}" for name, exc in self._failures.items()]
        body = {"status": "DOWN" if problems else "UP", "worker": self.worker_id, "problems": problems}
        return Reply(503 if problems else 200, body)

    def metrics_text(self) -> bytes:
        text: bytes = generate_latest(METRICS_REGISTRY)
        return text

    def workers(self) -> Reply:
        live = self.control.live_workers()
        live[self.worker_id] = self._status()
        rows = [
            {
                "worker": worker,
                "url": status.get("url"),
                "buckets": status.get("buckets", []),
                "pipelines": {name: p.get("state") for name, p in status.get("pipelines", {}).items()},
                "last_seen_s": round(max(0.0, time.time() - status.get("at", 0)), 3),
            }
            for worker, status in sorted(live.items())
        ]
        return Reply(200, {"group": self.config.id, "workers": rows})

    def pipelines(self) -> Reply:
        return Reply(200, sorted(self.specs))

    def _unknown(self, name: str) -> Reply | None:
        if name in self.specs:
            return None
        return Reply(404, {"error": f"no pipeline {name!r} in group {self.config.id}; known: {sorted(self.specs)}"})

    def status(self, name: str) -> Reply:
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        live = self.control.live_workers()
        live[self.worker_id] = self._status()
        partitions: dict[str, dict[str, Any]] = {}
        seen_at: dict[str, float] = {}
        states = {}
        for worker, status in live.items():
            pipeline = status.get("pipelines", {}).get(name)
            if pipeline is None:
                continue
            states[worker] = pipeline.get("state")
            for pid, row in pipeline.get("partitions", {}).items():
                if status["at"] >= seen_at.get(pid, float("-inf")):
                    seen_at[pid] = status["at"]
                    partitions[pid] = {"owner": worker, "url": status.get("url"), **row}
        listed = self.control.announced_partitions(name) or sorted(self.runners[name].listed_partition_ids)
        body = {
            "name": name,
            "state": "PAUSED" if self.control.paused(name) else "RUNNING",
            "workers": states,
            "partitions": dict(sorted(partitions.items())),
            "unassigned": sorted(set(listed) - set(partitions)),
        }
        return Reply(200, body)

    def pause(self, name: str, paused: bool) -> Reply:
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        self.control.set_paused(name, paused, by=self.worker_id)
        wanted = "PAUSED" if paused else "RUNNING"
        deadline = time.monotonic() + _PAUSE_CONFIRM_TIMEOUT_S
        while True:
            states = self.status(name).body["workers"]
            waiting = sorted(w for w, state in states.items() if state not in (wanted, "STOPPED"))
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        body = {"name": name, "state": wanted, "workers": states}
        if waiting:
            body["not_yet_confirmed_by"] = waiting
        return Reply(200 if not waiting else 202, body)

    def _store(self, name: str) -> CheckpointStore[Any]:
        with self._stores_lock:
            store = self._stores.get(name)
            if store is None:
                spec = self.specs[name]
                store = self.factory.create(spec.checkpoint, PluginContext(spec.name, spec.file))
                store.open()
                self._stores[name] = store
            return store

    def offsets(self, name: str) -> Reply:
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        checkpoints = self._store(name).load()
        return Reply(200, offsets_body(name, checkpoints))

    def change_offsets(self, name: str, partitions: dict[str, dict[str, Any] | None] | None) -> Reply:
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        if not self.control.paused(name):
            return Reply(
                409,
                {
                    "error": f"pipeline {name} is running: offsets change only while it is paused "
                    f"(PUT /pipelines/{name}/pause first), so that no worker overwrites them"
                },
            )
        known = set(self.control.announced_partitions(name) or ()) | set(self.runners[name].listed_partition_ids)
        targets = dict.fromkeys(sorted(known)) if partitions is None else dict(partitions)
        strangers = sorted(set(targets) - known)
        if strangers:
            return Reply(
                400,
                {"error": f"pipeline {name} has no partitions {strangers}; it has {len(known)}: {sorted(known)[:20]}"},
            )
        if not targets:
            return Reply(200, {"name": name, "partitions": [], "message": "no partitions to change"})
        command = self.control.send_offsets_command(name, targets)
        try:
            answers = self.control.wait_for_acks(
                command,
                lambda acks: (
                    any("refused" in a for a in acks.values())
                    or set(targets) <= {pid for a in acks.values() for pid in a.get("partitions", [])}
                ),
                _OFFSETS_ANSWER_TIMEOUT_S,
            )
        finally:
            self.control.forget_command(command)
        refused = [a["refused"] for a in answers.values() if "refused" in a]
        if refused:
            return Reply(409, {"error": f"pipeline {name}: {refused[0]}; pause it first"})
        applied = sorted({pid for a in answers.values() for pid in a.get("partitions", [])})
        missing = sorted(set(targets) - set(applied))
        if missing:
            return Reply(
                504, {"error": f"no owner changed {missing} in time (a rebalance?); try again", "partitions": applied}
            )
        what = "reset to their start" if partitions is None or all(v is None for v in targets.values()) else "set"
        return Reply(200, {"name": name, "partitions": applied, "message": f"{len(applied)} partitions {what}"})

    def request_snapshot(self, name: str, table: str, where: str | None) -> Reply:
        """Queue a live snapshot in every partition carrying ``table``, through the control topic:
        each owner puts it into its partitions' offsets and commits before it answers."""
        unknown = self._unknown(name)
        if unknown is not None:
            return unknown
        source = self.runners[name].source
        if not isinstance(source, LiveSnapshotSource):
            kind = self.specs[name].source.config.type
            return Reply(400, {"error": f"pipeline {name}: source type {kind!r} takes no live snapshots"})
        request = SnapshotRequest(table, where)
        try:
            source.check_snapshot_request(request)
        except SnapshotRequestError as exc:
            return Reply(400, {"error": f"{type(exc).__name__}: {exc}"})
        known = set(self.control.announced_partitions(name) or ()) | set(self.runners[name].listed_partition_ids)

        def answered(acks: Mapping[str, Mapping[str, Any]]) -> set[str]:
            return {pid for a in acks.values() for pid in (*a.get("partitions", []), *a.get("skipped", []))}

        command = self.control.send_snapshot_command(name, request.to_json())
        try:
            answers = self.control.wait_for_acks(
                command,
                lambda acks: any("refused" in a for a in acks.values()) or known <= answered(acks),
                _OFFSETS_ANSWER_TIMEOUT_S,
            )
        finally:
            self.control.forget_command(command)
        refused = [a["refused"] for a in answers.values() if "refused" in a]
        queued = sorted({pid for a in answers.values() for pid in a.get("partitions", [])})
        if refused:
            return Reply(409, {"error": f"pipeline {name}: {refused[0]}", "partitions": queued})
        missing = sorted(known - answered(answers))
        if missing:
            return Reply(
                504,
                {
                    "error": f"no owner answered for {missing} in time (a rebalance?); the snapshot is queued in "
                    f"{queued or 'no partition'}: ask again (it is queued again where it was)",
                    "partitions": queued,
                },
            )
        if not queued:
            return Reply(400, {"error": f"pipeline {name}: none of its partitions carries {table}"})
        body = {"name": name, "request": request.id, "table": table, "where": request.where, "partitions": queued}
        return Reply(200, body)


def offsets_body(name: str, checkpoints: Mapping[str, Checkpoint]) -> dict[str, Any]:
    """What ``offsets show`` and ``GET /pipelines/{name}/offsets`` print: each checkpoint, with its
    lag as of the commit (0: the partition had nothing more then) and how long ago that was."""
    now_us = time.time() * 1e6
    return {
        "pipeline": name,
        "partitions": {
            pid: {
                **c.to_json(),
                "lag_s": round(c.lag_at_commit_s(), 3),
                "committed_s_ago": round((now_us - c.committed_at_us) / 1e6, 3),
            }
            for pid, c in sorted(checkpoints.items())
        },
    }
