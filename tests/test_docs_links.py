"""README.md and docs/*.md: every relative link reaches a file, every #anchor a heading, and the README stays short.

Links are Markdown's `[text](path)`, `[text](path#anchor)`, `[text](#anchor)` and `![alt](path)`, outside
code blocks and code spans. A path is relative to the file that links it; an anchor must equal the
GitHub-style slug of a heading in the target Markdown file. Links with a scheme (https:, mailto:) are not
followed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 300
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
_LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]"         # [text], one level of [] inside
                   r"\(\s*<?(?P<target>[^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")   # (target "title")
_DEFINITION = re.compile(r"^ {0,3}\[(?P<text>[^\]]+)\]:\s*<?(?P<target>\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _prose_lines(text: str) -> list[str]:
    """The file's lines with fenced code blocks blanked and code spans replaced by spaces (line numbers kept)."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
        elif fence is not None:
            if m and m.group(1).startswith(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            out.append("")
        else:
            out.append(_CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line))
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown, lower case, punctuation but '-' and '_'
    dropped, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # links and images: their text
    text = _CODE_SPAN.sub(lambda s: s.group(2), text)                 # code spans: their content
    text = re.sub(r"<[^>]+>", "", text)                               # inline HTML
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def heading_slugs(path: Path) -> set[str]:
    """Every anchor a Markdown file's headings give, with GitHub's -1, -2 … for repeated ones."""
    seen: dict[str, int] = {}
    slugs: set[str] = set()
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if m and m.group(1).startswith(fence):
                fence = None
            continue
        h = _HEADING.match(line)
        if h is None:
            continue
        slug = github_slug(h.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def links(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, link text, target) of every link and link definition in a Markdown file."""
    lines = _prose_lines(path.read_text(encoding="utf-8"))
    prose = "\n".join(lines)
    for pattern in (_LINK, _DEFINITION):
        for m in pattern.finditer(prose):
            yield prose.count("\n", 0, m.start()) + 1, m.group("text"), m.group("target")


def problems(path: Path) -> list[str]:
    """One line per broken relative link of `path`: the file, the link, and what is missing."""
    found = []
    where = path.relative_to(ROOT)
    for line, text, target in links(path):
        if _SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        if not file_part and not anchor:
            found.append(f"{where}:{line}: link [{text}]({target}) has no target")
            continue
        file_part = unquote(file_part)
        if not file_part:
            resolved = path
        elif file_part.startswith("/"):
            resolved = ROOT / file_part.lstrip("/")
        else:
            resolved = (path.parent / file_part).resolve()
        shown = resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved
        if not resolved.exists():
            found.append(f"{where}:{line}: link [{text}]({target}): file {shown} does not exist")
            continue
        if not anchor:
            continue
        if resolved.suffix.lower() != ".md" or not resolved.is_file():
            found.append(f"{where}:{line}: link [{text}]({target}): anchor #{anchor} on {shown}, "
                         "which is not a Markdown file")
        elif anchor not in heading_slugs(resolved):
            found.append(f"{where}:{line}: link [{text}]({target}): {shown} has no heading whose anchor is "
                         f"#{anchor}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_relative_links_reach_a_file_and_a_heading(doc: Path) -> None:
    broken = problems(doc)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_at_most_300_lines() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines, more than {README_MAX_LINES}: move reference to docs/"


@pytest.mark.parametrize(("heading", "slug"), [
    ("Webhook delivery", "webhook-delivery"),
    ("`gold.slo_status`", "goldslo_status"),
    ("Watching deliveries locally: `isrwatch webhook-receiver`",
     "watching-deliveries-locally-isrwatch-webhook-receiver"),
    ("Bronze: written by the emulator", "bronze-written-by-the-emulator"),
    ("See [the API](api.md) now", "see-the-api-now"),
    ("`alerts`, `posture`, `slo`", "alerts-posture-slo"),
])
def test_github_slugs(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug
