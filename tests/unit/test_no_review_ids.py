"""Code and user docs name behaviour, not the history of a finding: review ids (F12, G9, S3)
and issue numbers stay in the changelog, the commits, and the footnotes of the internals page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ID = re.compile(r"\b[FGS][0-9]+\b|issue [0-9]+")
FOOTNOTE = re.compile(r"\[\^[FGS][0-9]+\]:?.*")


def _hits(path: Path, allow_footnotes: bool) -> list[str]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = FOOTNOTE.sub("", line) if allow_footnotes else line
        if allow_footnotes:
            text = re.sub(r"\[\^[FGS][0-9]+\]", "", text)
        if ID.search(text):
            out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    return out


def test_package_code_and_user_docs_carry_no_review_ids() -> None:
    hits = []
    for path in sorted((ROOT / "cassieq_spark").rglob("*.py")):
        hits += _hits(path, allow_footnotes=False)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        hits += _hits(path, allow_footnotes="internals" in path.parts)
    assert not hits, "\n".join(hits)


def test_the_check_sees_an_id() -> None:
    assert ID.search("a replay (G9) differs") and ID.search("see issue 16")
    assert not ID.search("figure F, the G-string, 64 KiB")
    footnoted = ROOT / "docs" / "internals" / "protocol.md"
    assert "[^G9]" in footnoted.read_text(encoding="utf-8")
