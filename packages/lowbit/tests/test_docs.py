"""The docs name only flags that exist, and the README keeps its two commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lowbit.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[3]
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-v)\b")
SECTION = re.compile(r"^## lowbit (\w+)\s*$", re.MULTILINE)


def _options(parser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def _subparsers() -> tuple[set[str], dict[str, set[str]]]:
    parser = build_parser(method_flags=True)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return _options(parser), {name: _options(p) for name, p in sub.choices.items()}


def _sections(text: str) -> dict[str, str]:
    marks = list(SECTION.finditer(text))
    return {
        m.group(1): text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        for i, m in enumerate(marks)
    }


@pytest.fixture(scope="module")
def cli_md() -> str:
    return (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_every_subcommand_has_a_section_and_every_flag_in_it_exists(cli_md: str) -> None:
    global_flags, commands = _subparsers()
    sections = _sections(cli_md)
    assert set(sections) == set(commands), "docs/cli.md sections vs parser subcommands"
    for name, body in sections.items():
        named = set(FLAG.findall(body)) - {"--help"}
        unknown = named - commands[name] - global_flags
        assert not unknown, f"docs/cli.md, lowbit {name}: flags that do not exist: {sorted(unknown)}"


def test_every_flag_of_every_subcommand_is_documented(cli_md: str) -> None:
    _, commands = _subparsers()
    sections = _sections(cli_md)
    for name, flags in commands.items():
        missing = {f for f in flags if f.startswith("--") and f != "--help"} - set(FLAG.findall(sections[name]))
        assert not missing, f"docs/cli.md, lowbit {name}: undocumented flags {sorted(missing)}"


def test_global_flags_named_in_the_docs_exist(cli_md: str) -> None:
    global_flags, _ = _subparsers()
    preamble = cli_md.split("## lowbit", 1)[0]
    assert set(FLAG.findall(preamble)) - {"--help"} <= global_flags


def test_quickstart_page_names_only_quickstart_flags() -> None:
    _, commands = _subparsers()
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    used = set(re.findall(r"lowbit quickstart([^\n`]*)", text))
    named = {f for line in used for f in FLAG.findall(line)}
    assert named <= commands["quickstart"], sorted(named - commands["quickstart"])


def test_readme_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    first = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert first[0].startswith("python3 -m pip install nox && python3 -m nox -s quickstart")
    assert first[1].startswith("python3 -m pip install nox && python3 -m nox -s tests")


def test_index_links_every_docs_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")
    missing = [p for p in pages if f"({p})" not in index]
    assert not missing, f"docs/index.md does not link {missing}"
