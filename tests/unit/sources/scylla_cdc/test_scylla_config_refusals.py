"""`cdcflow validate` refuses a scylla_cdc source ScyllaDB would not serve, naming the field.

Issue 22, item 5. Both rules come from ScyllaDB's code (scylladb f4a4091):

- ``db/consistency_level.cc`` lines 401-409, ``validate_for_read``: ``ANY`` and ``EACH_QUORUM`` are
  refused for reads ("EACH_QUORUM ConsistencyLevel is only supported for writes"); every log query
  of the source would fail with an invalid request.
- ``cdc/metadata.cc`` lines 87-128, ``get_vnode_stream``: a write stamped up to the generation
  leeway (``cdc/generation.cc`` ``get_generation_leeway``: 5 s) in the past is still accepted, and
  a replica may apply it up to the write timeout later; a confidence window shorter than both
  together can read past a change that is not there yet, and never read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcflow.cli import main

PIPELINE = """\
name: scylla-refusals
source:
  type: scylla_cdc
  tables: [shop.orders]
{extra}sink: {{type: file, path: out.jsonl}}
checkpoint: {{type: file, path: ckpt}}
"""


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], **source: object) -> tuple[int, str]:
    extra = "".join(f"  {name}: {value}\n" for name, value in source.items())
    file = tmp_path / "pipeline.yaml"
    file.write_text(PIPELINE.format(extra=extra))
    code = main(["validate", str(file)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("level", ["EACH_QUORUM", "ANY"])
def test_a_read_consistency_scylladb_refuses_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], level: str
) -> None:
    code, err = validate(tmp_path, capsys, consistency=level)
    assert code == 2, err
    assert "source.consistency" in err
    assert f"{level} is only supported for writes" in err  # ScyllaDB's own words for it
    assert "LOCAL_QUORUM" in err  # and what to use instead


def test_the_confidence_window_must_cover_the_write_timeout_and_the_generation_leeway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 6 s covers the 2 s write timeout, but not the 2 s plus the 5 s generation leeway
    code, err = validate(tmp_path, capsys, confidence_window_ms=6000, cluster_write_timeout_ms=2000)
    assert code == 2, err
    assert "source.confidence_window_ms" in err
    assert "7000" in err and "generation leeway" in err
    code, err = validate(tmp_path, capsys, confidence_window_ms=7000, cluster_write_timeout_ms=2000)
    assert code == 0, err


def test_a_lower_leeway_is_taken_for_a_test_cluster_only_when_stated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = validate(tmp_path, capsys, confidence_window_ms=3000, cluster_write_timeout_ms=1000)
    assert code == 2, err
    code, err = validate(
        tmp_path, capsys, confidence_window_ms=3000, cluster_write_timeout_ms=1000, generation_leeway_ms=2000
    )
    assert code == 0, err


def test_the_defaults_and_the_shipped_read_levels_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for level in ("ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "ALL"):
        code, err = validate(tmp_path, capsys, consistency=level)
        assert code == 0, (level, err)
