"""The documentation: links that resolve, the guides the README opens, a configuration guide
that agrees with Settings and .env.example, and an architecture map whose files exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from src.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
DOCS = ROOT / "docs"
GUIDES = ("telegram", "configuration", "memory", "devtools", "architecture", "benchmarks")
SEEDS = ("000", "001", "002", "003", "004")
README_MAX_LINES = 300

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
SETTING_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \|", re.MULTILINE)
EXAMPLE_LINE = re.compile(r"^# ([A-Z][A-Z0-9_]*)=(.*)$", re.MULTILINE)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
REPO_PATH = re.compile(r"(?<![\w./-])((?:src|sql|bench|tests|docs)/[\w./-]*[\w/])")


def doc_files() -> list[Path]:
    return [README, CHANGELOG, *sorted(DOCS.glob("*.md"))]


def guide_files() -> list[Path]:
    """The README and the guides: the texts that describe today's code (not the changelog)."""
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(path: Path) -> str:
    """Return the file's Markdown without its fenced code blocks."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """Return the anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose(path)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(prose(path))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    assert path.exists(), f"{path.relative_to(ROOT)} is missing"
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        target_path = (path.parent / file_part).resolve() if file_part else path
        if not target_path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and target_path.suffix == ".md" and anchor not in anchors(target_path):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_readme_links_every_guide() -> None:
    linked = {target.partition("#")[0] for target in links(README)}
    for guide in GUIDES:
        assert (DOCS / f"{guide}.md").exists(), f"docs/{guide}.md is missing"
        assert f"docs/{guide}.md" in linked, f"README.md does not link docs/{guide}.md"
    assert "CHANGELOG.md" in linked


@pytest.mark.parametrize("path", guide_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_guides_name_no_issue_numbers(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"\bissues?\s+#?\d+|\(#\d+\)", text, flags=re.IGNORECASE)


# --- docs/configuration.md: every setting, with .env.example's default ---


def configuration_rows() -> dict[str, str]:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    return {name: default.strip() for name, default in SETTING_ROW.findall(text)}


def test_configuration_lists_every_setting() -> None:
    assert set(configuration_rows()) == {name.upper() for name in Settings.model_fields}


def test_configuration_defaults_agree_with_env_example() -> None:
    example = dict(EXAMPLE_LINE.findall((ROOT / ".env.example").read_text(encoding="utf-8")))
    rows = configuration_rows()
    for name, value in example.items():
        default = rows[name]
        if value:
            assert default == f"`{value}`", f"{name}: .env.example has {value!r}, docs {default}"
        else:
            assert not default.startswith("`"), f"{name} is unset in .env.example, docs {default}"


# --- docs/architecture.md: the map names the file of every seed feature ---


def map_section() -> str:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    match = re.search(r"^## Map\b.*?(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert match, "docs/architecture.md has no '## Map' section"
    return match.group(0)


def paths_in(text: str) -> set[str]:
    return {
        path.rstrip("/") for span in CODE_SPAN.findall(text) for path in REPO_PATH.findall(span)
    }


def map_paths() -> set[str]:
    return paths_in(map_section())


def test_architecture_map_covers_every_seed() -> None:
    rows = [line for line in map_section().splitlines() if line.startswith("|")]
    for seed in SEEDS:
        named = [row for row in rows if f"seed {seed}" in row and paths_in(row)]
        assert named, f"the map names no file for seed {seed}"


def test_architecture_map_files_exist() -> None:
    missing = sorted(path for path in map_paths() if not (ROOT / path).exists())
    assert not missing, f"docs/architecture.md's map names files that do not exist: {missing}"


@pytest.mark.parametrize("path", guide_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_guides_name_only_files_in_the_map(path: Path) -> None:
    """File names live in one place (the map), so a move is corrected there."""
    unmapped = sorted(paths_in(path.read_text(encoding="utf-8")) - map_paths())
    assert not unmapped, f"{path.relative_to(ROOT)} names files the map does not: {unmapped}"
