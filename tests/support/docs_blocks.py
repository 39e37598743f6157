"""The fenced code blocks of README.md and docs/*.md, for the tests that keep the pages true.

A block is excluded from running only by an explicit marker on the nearest non-blank line
before it: ``<!-- not-run: why -->`` (the reason is required).
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")))
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the marker's reason

    @property
    def where(self) -> str:
        shown = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{shown}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page.relative_to(ROOT)}:{i + 1}: a code fence that never closes")
        before = i - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = NOT_RUN.match(lines[before]) if before >= 0 else None
        code = textwrap.dedent("\n".join(lines[i + 1 : end]))
        out.append(Block(page, i + 1, opening.group(1), code, marker.group(1) if marker else None))
        i = end + 1
    return out


def all_blocks(lang: str) -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.lang == lang]


SEPARATORS = {"|", "||", "&&", ";", "&"}
REDIRECTS = re.compile(r"^\d*[<>]")


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block (words only: separators, comments and redirections
    removed, ``<placeholder>`` kept as a plain word)."""
    text = code.replace("\\\n", " ")
    text = re.sub(r"<([A-Za-z_][\w-]*)>", r"\1", text)  # <pop_receipt>: a value to fill in
    commands: list[list[str]] = []
    for line in text.splitlines():
        # A comment starts a word, as in bash: `env.tar.gz#env` is one word.
        lexer = shlex.shlex(re.sub(r"(^|\s)#.*$", "", line), posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        words: list[str] = []
        redirect = False
        for token in lexer:
            if token in SEPARATORS:
                commands.append(words)
                words, redirect = [], False
            elif REDIRECTS.match(token) or set(token) <= set("<>&"):
                redirect = True  # the next word is the redirection's target
            elif redirect:
                redirect = False
            else:
                words.append(token)
        commands.append(words)
    return [c for c in commands if c]


def program_args(command: list[str], program: str) -> list[str] | None:
    """The arguments of ``program`` in ``command`` (after any VAR=value, a path to it, or
    ``python -m``/``spark-submit``); None when the command runs something else."""
    words = list(command)
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        words.pop(0)
    for i, word in enumerate(words):
        if word == program or word.endswith("/" + program):
            return words[i + 1 :]
    return None
