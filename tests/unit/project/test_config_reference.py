"""docs/config-reference.md is what ``python -m cdcflow.config_reference`` writes from the models now."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from cdcflow.config_reference import main, render_config_reference
from cdcflow.plugins import PluginRegistry
from tests.paths import REPO

REFERENCE = REPO / "docs" / "config-reference.md"


@pytest.fixture(scope="module")
def rendered() -> str:
    return render_config_reference(PluginRegistry.from_entry_points())


def test_the_committed_reference_is_what_the_models_say_now(rendered: str) -> None:
    committed = REFERENCE.read_text(encoding="utf-8")
    assert committed == rendered, (
        "docs/config-reference.md is stale: a config model changed. Regenerate it from the repository's "
        "root with `python -m cdcflow.config_reference` and commit it"
    )


def test_every_built_in_plugin_and_every_field_of_its_model_is_listed(rendered: str) -> None:
    for entry in PluginRegistry.from_entry_points().registered():
        if not entry.builtin:
            continue
        assert f"### {entry.kind} `{entry.type_name}`" in rendered
        model: type[BaseModel] = entry.cls.config_model
        for name in model.model_fields:
            assert f"| `{name}` |" in rendered, f"{entry.kind} {entry.type_name}: {name} missing"


def test_check_fails_on_a_stale_file_and_passes_on_a_fresh_one(tmp_path: Path) -> None:
    reference = tmp_path / "config-reference.md"
    reference.write_text(REFERENCE.read_text(encoding="utf-8").replace("| `workers` |", "| `worker_count` |"))
    assert main(["--check", str(reference)]) == 1
    assert main([str(reference)]) == 0
    assert main(["--check", str(reference)]) == 0


class _Example(BaseModel):
    """An example section for the test."""

    name: str = Field(pattern=r"^[a-z]+$", description="topics are <cluster>.<table>, see `a|b`")
    count: int | None = Field(default=None, ge=1, le=10)


def test_a_field_gives_its_type_constraints_default_and_escaped_description() -> None:
    class _One:
        kind = "source"
        type_name = "example"
        builtin = True

        class cls:  # noqa: N801 - the registry's attribute name
            __doc__ = "``example``: a source of <rows>."
            config_model = _Example

    class _Listing:
        def registered(self, kind: str | None = None) -> list[_One]:
            return [_One()] if kind == "source" else []

    page = render_config_reference(_Listing())
    assert "`example`: a source of \\<rows\\>." in page
    assert (
        "| `name` | string, matching `^[a-z]+$` | *required* | topics are \\<cluster\\>.\\<table\\>, see `a\\|b` |"
        in page
    )
    assert "| `count` | integer \\| null, ≥ 1, ≤ 10 | `null` |  |" in page
