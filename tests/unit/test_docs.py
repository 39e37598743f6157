"""The README and docs/ pages against the code, without a server: every `cassieq` and
`jobs/repair.py` command line they show parses, every `make` target exists, every relative link
and anchor resolves, and docs/layout.md names the tree (docs/spark.md's option table:
test_option_reference_is_generated.py)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest
from support.docs_blocks import PAGES, ROOT, Block, all_blocks, blocks, program_args, shell_commands

from cassieq_spark.cli import build_parser as cassieq_parser

SHELL_BLOCKS = all_blocks("bash")


def _repair_parser() -> argparse.ArgumentParser:
    spec = importlib.util.spec_from_file_location("docs_repair_job", ROOT / "jobs" / "repair.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_parser()


def _refusal(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """argparse's complaint about ``args``, or None when they parse."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            return err.getvalue().strip().splitlines()[-1] if exc.code else None
    return None


def _commands(program: str) -> list[tuple[str, list[str]]]:
    found = []
    for block in SHELL_BLOCKS:
        for command in shell_commands(block.code):
            args = program_args(command, program)
            if args is not None:
                found.append((block.where, args))
    return found


def test_the_pages_show_cassieq_and_repair_commands_at_all() -> None:
    # Guards the parsing below: a change that found no commands would pass vacuously.
    assert len(_commands("cassieq")) >= 10 and len(_commands("repair.py")) >= 3


@pytest.mark.parametrize(
    "program, parser",
    [("cassieq", cassieq_parser), ("repair.py", _repair_parser)],
)
def test_every_command_line_in_the_docs_parses(program: str, parser) -> None:
    p = parser()
    wrong = [
        f"{where}: {program} {' '.join(args)}: {why}"
        for where, args in _commands(program)
        if (why := _refusal(p, args))
    ]
    assert not wrong, "\n".join(wrong)


def test_a_command_the_cli_does_not_have_is_caught() -> None:
    p = cassieq_parser()
    assert _refusal(p, ["stats", "q", "--wacth"]) is not None
    assert _refusal(p, ["truncate", "q"]) is not None
    assert _refusal(p, ["stats", "q", "--watch", "--count", "3"]) is None


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"(?m)^([A-Za-z][\w-]*):", text))


def test_every_make_target_in_the_docs_exists() -> None:
    targets = _make_targets()
    assert {"demo", "test", "setup", "lint"} <= targets
    wrong = [
        f"{block.where}: make {word}"
        for block in SHELL_BLOCKS
        for command in shell_commands(block.code)
        if (args := program_args(command, "make")) is not None
        for word in args
        if "=" not in word and not word.startswith("-") and word not in targets
    ]
    assert not wrong, wrong


def test_readme_first_screen_has_the_two_commands() -> None:
    first = blocks(ROOT / "README.md")[0]
    assert first.lang == "bash"
    assert [c[:2] for c in shell_commands(first.code)] == [["make", "demo"], ["make", "test"]]
    assert first.line < 20


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
    return {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", text)}


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_and_anchor_resolves() -> None:
    wrong = []
    for page in (*PAGES, ROOT / "bench" / "README.md"):
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = page.relative_to(ROOT)
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                wrong.append(f"{where}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                wrong.append(f"{where}: {target}: no such heading")
    assert not wrong, "\n".join(wrong)


def test_exclusion_markers_are_explicit_and_give_a_reason() -> None:
    loose = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"^\s*<!--.*(skip|not.?run)", line, re.I)
        and not re.match(r"^\s*<!--\s*not-run:\s*\S.*-->\s*$", line)
    ]
    assert not loose, f"use <!-- not-run: reason --> just before the block: {loose}"


def test_every_cassieq_subcommand_is_documented() -> None:
    page = (ROOT / "docs" / "client.md").read_text(encoding="utf-8")
    sub = next(a for a in cassieq_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = sorted(name for name in sub.choices if f"`{name}" not in page)
    assert not missing, f"docs/client.md does not mention: {missing}"


# -- the layout page (docs/layout.md) --------------------------------------------------------

PATH_TOKEN = re.compile(r"(?<![\w./-])([A-Za-z_][\w.-]*(?:/[\w.-]+)*(?:/|\.py|\.md))(?![\w/])")


LAYOUT = ROOT / "docs" / "layout.md"


def _layout_block() -> Block:
    return next(b for b in blocks(LAYOUT) if b.lang == "")


def _layout_paths() -> list[str]:
    """Every path the Layout names, resolved through its indentation: an entry belongs to the
    nearest line above it, less indented, that starts with a directory."""
    stack: list[tuple[int, str]] = []  # (indent, directory) of the lines that opened one
    out = []
    for line in _layout_block().code.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        tokens = PATH_TOKEN.findall(line)
        first = line.split()[0]
        if tokens and first == tokens[0] and first.endswith("/"):
            here = parent + first
            stack.append((indent, here))
            out.append(here)
            out += [here + t for t in tokens[1:]]
        else:
            out += [parent + t for t in tokens]
    return out


def test_every_path_in_the_layout_exists() -> None:
    paths = _layout_paths()
    assert "cassieq_spark/engine/core/monoton.py" in paths and "jobs/demo.py" in paths, paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/layout.md names paths that do not exist: {missing}"


def test_the_layout_names_every_package() -> None:
    """Every package folder has its line (what a module does is its docstring's job, so a new
    module does not have to be added here)."""
    named = set(_layout_paths())
    packages = [
        p.parent.relative_to(ROOT).as_posix() + "/"
        for folder in ("cassieq_spark", "cassieq_dev", "pyspark_cassieq")
        for p in sorted((ROOT / folder).rglob("__init__.py"))
    ]
    missing = [m for m in packages if m not in named]
    assert not missing, f"docs/layout.md does not name: {missing}"


# -- what the prose names: make targets and variables, cassieq commands and flags, flags of any
# of the project's commands, CASSIEQ_* variables ------------------------------------------------

PROSE_PAGES = [page for page in PAGES if page.name != "CHANGELOG.md"]  # history names the past
CODE_DIRS = ("cassieq_spark", "cassieq_dev", "pyspark_cassieq", "jobs", "bench", "tests")
# Flags of other programs that the pages name in prose, by program.
OTHER_PROGRAMS_FLAGS = {
    "--durations": "pytest",
    "--durations-min": "pytest",
    "--dist": "pytest-xdist",
    "--archives": "spark-submit",
    "--files": "spark-submit",
    "--py-files": "spark-submit",
    "--resolution": "uv",
    "--help": "every command",
}
SPAN = re.compile(r"`([^`\n]+)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
ENV_VAR = re.compile(r"\b(CASSIEQ_[A-Z0-9_]+)\b")


def _code_text() -> str:
    here = Path(__file__).resolve()  # names what does not exist, on purpose
    files = [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py")) if p != here]
    files += [ROOT / "Makefile", ROOT / ".ci" / "run"]
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


def _make_variables() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text)) | set(
        re.findall(r"(?m)^([A-Z][A-Z0-9_]*)\s*[?:]?=", text)
    )


def _cassieq_problems(words: list[str]) -> list[str]:
    """What a `cassieq ...` line names that the parser does not have (words after `cassieq`)."""
    parser = cassieq_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = {s: a for a in parser._actions for s in a.option_strings}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            action = top.get(word.split("=")[0])
            if action is None:
                return [f"no flag {word} before the command"]
            i += 1 if action.nargs == 0 or "=" in word else 2
            continue
        if word in ("...", "COMMAND"):  # any command
            return []
        if word not in sub.choices:
            return [f"no command {word}"]
        flags = set(top) | {s for a in sub.choices[word]._actions for s in a.option_strings}
        rest = words[i + 1 :]
        return [f"no flag {w} of {word}" for w in rest if FLAG.fullmatch(w.split("=")[0])
                and w.split("=")[0] not in flags]  # fmt: skip
    return []


def _page_problems(text: str, code: str) -> list[str]:
    """Each target, make variable, command, flag or CASSIEQ_* variable ``text`` names that
    does not exist (prose: the inline code spans outside fenced blocks; variables: anywhere)."""
    from cassieq_spark.config.options import env_defaults

    targets, variables = _make_targets(), _make_variables()
    prose = re.sub(r"(?ms)^\s*```.*?^\s*```", "", text)
    problems = []
    for span in SPAN.findall(prose):
        plain = re.sub(r"\[([^\]]*)\]", r"\1", span)  # `make x [VAR=1]`: optional words
        try:
            commands = shell_commands(plain)
        except ValueError:  # not a shell line (a lone quote in a value, say)
            commands = [plain.split()]
        words = [w for c in commands for w in c]
        for command in commands:
            while command and re.match(r"^[A-Za-z_]\w*=", command[0]):
                command = command[1:]
            if command[:1] == ["make"]:
                for word in command[1:]:
                    name = word.split("=")[0]
                    if "=" in word and name not in variables:
                        problems.append(f"`{span}`: no make variable {name}")
                    elif "=" not in word and word[:1].isalpha() and word not in targets:
                        problems.append(f"`{span}`: no make target {word}")
            if command[:1] == ["cassieq"]:
                problems += [f"`{span}`: {p}" for p in _cassieq_problems(command[1:])]
        if words[:1] == ["cassieq"]:
            continue
        for flag in FLAG.findall(span):
            if flag not in OTHER_PROGRAMS_FLAGS and f'"{flag}"' not in code:
                problems.append(f"`{span}`: no command has the flag {flag}")
    for command in (c for b in re.findall(r"(?ms)^\s*```bash\n(.*?)^\s*```", text)
                    for c in shell_commands(b)):  # fmt: skip
        args = program_args(command, "make")
        for word in args or []:
            if "=" in word and word.split("=")[0] not in variables:
                problems.append(
                    f"make {' '.join(args or [])}: no make variable {word.split('=')[0]}"
                )
    for var in sorted(set(ENV_VAR.findall(text))):
        if not re.search(rf"\b{var}\b", code) and not env_defaults({var: "x"}):
            problems.append(f"{var}: no code reads it")
    return problems


def test_every_page_names_only_targets_commands_flags_and_variables_that_exist() -> None:
    code = _code_text()
    wrong = [
        f"{page.relative_to(ROOT)}: {problem}"
        for page in PROSE_PAGES
        for problem in _page_problems(page.read_text(encoding="utf-8"), code)
    ]
    assert not wrong, "\n".join(wrong)


def test_a_page_that_names_what_does_not_exist_is_caught() -> None:
    page = (
        "Run `make frobnicate`, or `make test NO_SUCH_VAR=1`; then `cassieq truncate q`,\n"
        "`cassieq stats q --wacth`, `--no-such-flag`, and set `CASSIEQ_NO_SUCH_THING`.\n"
        "```bash\nmake demo NOR_THIS=2\n```\n"
        "Fine: `make test TEST_WORKERS=0`, `cassieq --debug stats q --watch`, `--durations`,\n"
        "`CASSIEQ_WORKERS`, `CASSIEQ_SSL_CA_FILE`.\n"
    )
    found = _page_problems(page, _code_text())
    expected = [
        "no make target frobnicate",
        "no make variable NO_SUCH_VAR",
        "no command truncate",
        "no flag --wacth of stats",
        "no command has the flag --no-such-flag",
        "no make variable NOR_THIS",
        "CASSIEQ_NO_SUCH_THING: no code reads it",
    ]
    for what in expected:
        assert any(what in problem for problem in found), (what, found)
    assert len(found) == len(expected), found
