"""Every relative link in the project's Markdown resolves: the file exists, and a ``#anchor`` names
a heading of that file by GitHub's slug rule (lower case, punctuation dropped, spaces to hyphens,
``-1``, ``-2`` ... for repeated headings). Links inside code blocks and spans are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    """README.md and the other top-level guides, and every page under docs/."""
    files = [ROOT / name for name in TOP_LEVEL if (ROOT / name).exists()]
    return files + sorted((ROOT / "docs").rglob("*.md"))


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with code spans blanked."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: links to their text, then the slug rule."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeated headings numbered as GitHub does."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file (inline links, images and reference definitions)."""
    targets = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        targets += INLINE_LINK.findall(line)
        definition = REFERENCE_DEF.match(line)
        if definition:
            targets.append(definition.group(1))
    return targets


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``path`` whose file or heading does not exist (named from ``root``)."""
    problems = []
    for target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            problems.append(f"{target}: no such file {resolved.relative_to(root)}")
        elif anchor and resolved.suffix == ".md" and anchor.lower() not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(root)}")
    return problems


def test_slugs_follow_githubs_rule() -> None:
    assert slug("Kafka -> Delta write (`kappa load`)") == "kafka---delta-write-kappa-load"
    assert slug("What the embedded broker can lose (measured; an emulator limitation, not Kafka's)") == (
        "what-the-embedded-broker-can-lose-measured-an-emulator-limitation-not-kafkas")
    assert slug("Data access tier: concurrent SSE clients") == "data-access-tier-concurrent-sse-clients"
    assert slug("`rsvps.analyzed` (key: `event_id`), schema_version 1") == (
        "rsvpsanalyzed-key-event_id-schema_version-1")


def test_a_missing_file_and_a_missing_heading_are_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Late records\n", encoding="utf-8")
    page.write_text("[ok](other.md#late-records) [gone](nothing.md) [bad](other.md#the-fence)\n"
                    "`[in code](nothing.md)`\n```\n[in a block](nothing.md)\n```\n"
                    "[web](https://example.org/x.md)\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == ["nothing.md: no such file nothing.md",
                                            "other.md#the-fence: no heading #the-fence in other.md"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []
