"""The commit-log parser against segments the real Cassandra node wrote: every type, every operation.

Each case writes through cassandra-driver (``tests/commitlog_cases.py``), then reads cdc_raw until
its last write shows up, and compares the decoded changes with what it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdcflow.sources.cassandra_commitlog.changes import RowChange
from tests.commitlog_cases import CASES, by_case, finish, in_order
from tests.integration.commitlog_helpers import has_row, wait_for_changes


def _changes(cdc_raw: Path, session: Any, keyspace: str, cdc_only: bool = False) -> list[RowChange]:
    changes = wait_for_changes(cdc_raw, session, keyspace, has_row("done", k=1), cdc_only=cdc_only)
    assert has_row("done", k=1)(changes), "the final write never reached cdc_raw"
    return [c for c in changes if c.table != "done"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_decoded_changes_are_what_was_written(
    case: str, cassandra_session: Any, cdc_raw_dir: Path, keyspace: str
) -> None:
    expected = CASES[case](cassandra_session, keyspace)
    finish(cassandra_session, keyspace)
    changes = _changes(cdc_raw_dir, cassandra_session, keyspace)
    assert by_case([c.to_json() for c in changes]) == {case: in_order(case, expected)}
    timestamps = [c.ts_us for c in changes]
    assert all(t > 0 for t in timestamps)


def test_tables_without_cdc_are_skipped(cassandra_session: Any, cdc_raw_dir: Path, keyspace: str) -> None:
    CASES["batch_over_tables"](cassandra_session, keyspace)
    finish(cassandra_session, keyspace)
    changes = _changes(cdc_raw_dir, cassandra_session, keyspace, cdc_only=True)
    assert sorted(c.table for c in changes) == ["order_lines", "orders"]
