"""Every relative link of the README and docs/ leads to a file that exists, and every #anchor to a
heading of that file (GitHub's anchors)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from cdcflow.config_reference import github_anchor
from tests.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (a `# comment` there is no heading, a `](` no link)."""
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def anchors_of(page: Path) -> set[str]:
    """The fragments GitHub gives the page's headings; a repeated one gets -1, -2..."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in _HEADING.findall(_prose(page)):
        anchor = github_anchor(heading)
        found.add(anchor if seen[anchor] == 0 else f"{anchor}-{seen[anchor]}")
        seen[anchor] += 1
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors_of(linked):
            broken.append(f"{target}: {linked.name} has no heading #{anchor}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_missing_file_and_a_missing_anchor_are_both_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## Kafka security: SASL and TLS\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#kafka-security-sasl-and-tls) [self](#here) [gone](missing.md) "
        "[no anchor](other.md#not-a-heading) [web](https://example.org/x)\n\n## Here\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#not-a-heading: other.md has no heading #not-a-heading",
    ]


def test_the_readme_stays_a_front_door() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    # The two commands a fresh machine runs (tests/integration/test_fresh_machine.py), and CI's.
    assert "```sh\nbash scripts/demo.sh\n```" in readme
    assert "```sh\nbash scripts/test.sh\n```" in readme
