"""What the ``tikv_rawkv`` source needs of the cluster, checked from PD's and TiKV's own answers
(``cdcflow doctor``, and the store versions at every start): every store on TiKV 6.2.0 or later,
the storage on API V2, and the pipeline's checkpoints above the GC safepoint and younger than the
GC TTL.

* TiKV serves a RawKV change feed from 6.2.0 on, on ``storage.api-version = 2`` only: before, or
  on V1, it answers a ``compatibility`` error naming 6.2.0 (tikv/tikv ``components/cdc/src/
  service.rs`` ``validate_kv_api``, ``endpoint.rs`` ``on_register``). PD reports each store's
  version in ``GetAllStores`` (``metapb.Store.version``, as TiKV put it), which TiKV-CDC checks
  too (tikv/migration ``cdc/pkg/version/check.go``).
* API V1 storage refuses a V2 request (tikv/tikv ``src/storage/mod.rs`` ``check_api_version``):
  one RawGet in the keyspace tells.
* Versions below the GC safepoint may be gone; a checkpoint older than the GC TTL is one the
  service safepoint no longer protects once the pipeline stops (TiCDC's own rule: pingcap/tiflow
  ``pkg/txnutil/gc/gc_manager.go`` ``CheckStaleCheckpointTs``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcflow.errors import CdcflowError
from cdcflow.prerequisites import CheckResult
from cdcflow.sources.tikv_client.codec import KeyCodec, ts_to_us
from cdcflow.sources.tikv_client.exceptions import TiKVServerError

if TYPE_CHECKING:
    from cdcflow.sources.tikv_client.pd import PDClient
    from cdcflow.sources.tikv_rawkv.source import TiKVRawKVSourceConfig

__all__ = ["MIN_TIKV_VERSION", "check_api_version", "check_gc", "check_store_versions"]

MIN_TIKV_VERSION = (6, 2, 0)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def _version_text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def check_store_versions(pd: PDClient) -> list[CheckResult]:
    """Each store PD knows runs a TiKV that serves RawKV change feeds."""
    check = f"TiKV {_version_text(MIN_TIKV_VERSION)} or later on every store"
    stores = pd.get_all_stores()
    if not stores:
        return [CheckResult.fail(check, "PD knows no store", "start the TiKV stores, or fix pd_endpoints")]
    old, unknown, found = [], [], []
    for store in stores:
        match = _VERSION.match(store.version)
        if match is None:
            unknown.append(f"store {store.id} ({store.address}): {store.version or 'no version'}")
            continue
        version = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
        found.append(store.version)
        if version < MIN_TIKV_VERSION:
            old.append(f"store {store.id} ({store.address}) runs {store.version}")
    if old:
        return [
            CheckResult.fail(
                check,
                "; ".join(old) + ": TiKV serves RawKV change data from 6.2.0 on",
                f"upgrade those stores to TiKV {_version_text(MIN_TIKV_VERSION)} or later",
            )
        ]
    if unknown:
        return [
            CheckResult.warn(
                check,
                "PD reports no readable version for " + "; ".join(unknown),
                f"check that those stores run TiKV {_version_text(MIN_TIKV_VERSION)} or later",
            )
        ]
    return [CheckResult.ok(check, f"{len(stores)} store(s): {', '.join(sorted(set(found)))}")]


def check_api_version(pd: PDClient, config: TiKVRawKVSourceConfig, probe_key: bytes, timeout_s: float) -> CheckResult:
    """One RawGet in the followed keyspace, as API V2: V1 storage refuses it."""
    check = f"API V2 storage (keyspace {config.keyspace_id})"
    from cdcflow.sources.tikv_client.rawkv import RawKVClient  # cdcflow[tikv] (grpc)

    client = RawKVClient(pd, KeyCodec(2, config.keyspace_id), timeout_s=timeout_s, backoff_budget_s=timeout_s)
    try:
        client.get(probe_key)
    except TiKVServerError as exc:
        return CheckResult.fail(
            check,
            f"TiKV refused a RawKV API V2 request: {exc}",
            "run TiKV with storage.api-version = 2 (and storage.enable-ttl = true); the RawKV change feed needs it",
        )
    finally:
        client.close()
    return CheckResult.ok(check, "a RawKV API V2 request was answered")


def check_gc(
    pd: PDClient, config: TiKVRawKVSourceConfig, committed: Callable[[], Mapping[str, Mapping[str, Any]]] | None
) -> Sequence[CheckResult]:
    """The checkpoints (or ``start_ts``, before any) above the GC safepoint, and younger than the
    GC TTL."""
    safe_point = pd.get_gc_safe_point()
    try:
        offsets = committed() if committed is not None else {}
    except CdcflowError as exc:  # the checkpoint store's own checks say why
        return [CheckResult.skip("above the GC safepoint", f"the committed offsets cannot be read: {exc}")]
    stamps = [int(offset["ts"]) for offset in offsets.values() if "ts" in offset]
    if stamps:
        oldest, what = min(stamps), f"the oldest checkpoint, ts {min(stamps)}"
    elif config.start_ts is not None:
        oldest, what = config.start_ts, f"start_ts {config.start_ts}"
    else:
        return [
            CheckResult.ok("above the GC safepoint", f"no checkpoint yet, starts at PD's now; safepoint {safe_point}")
        ]
    check = "above the GC safepoint"
    if oldest < safe_point:
        return [
            CheckResult.fail(
                check,
                f"{what} is below the cluster's GC safepoint {safe_point}: changes between them may be gone",
                "restore the downstream from a backup taken after the safepoint, then reset the offsets "
                "(cdcflow offsets reset FILE) with start_ts at that backup's timestamp",
            )
        ]
    results = [CheckResult.ok(check, f"{what}, GC safepoint {safe_point}")]
    age_s = time.time() - ts_to_us(oldest) / 1e6
    ttl_check = f"checkpoint younger than gc_ttl_s ({config.gc_ttl_s} s)"
    if stamps and age_s > config.gc_ttl_s:
        results.append(
            CheckResult.fail(
                ttl_check,
                f"{what} is {age_s:.0f} s old: the service GC safepoint kept for it has expired, GC may pass it",
                "start the pipeline now; if GC has passed it, restore and reset as for the safepoint",
            )
        )
    elif stamps:
        results.append(CheckResult.ok(ttl_check, f"{age_s:.0f} s old"))
    return results
