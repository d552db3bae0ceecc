"""Commands in README.md and docs/ can be pasted as they are: no ``vanilla|braco``-style alternatives in code, which a
shell runs as a pipe (``bash scripts/next/x.sh vanilla|braco`` pipes into a command named ``braco``). Tables write a
literal bar as ``\\|``; prose names alternatives in words ("``braco`` or ``vanilla``"). A synopsis or a name grammar
keeps its alternatives inside brackets (``[--backbone llama-clip|qwen2-siglip]``, ``braco_c{C}s{S}[_coef|_idct]``),
which nobody runs as it stands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "playground" / "data" / "eval" / "README.md"]
#: A bar between two words with no space around it, not escaped: how an alternative, not a pipe or a table, is written.
ALTERNATIVE = re.compile(r"(?<!\\)(?<=[\w>\])])\|(?=[\w<\[-])")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
BRACKETED = re.compile(r"\[[^\[\]]*\]")


def placeholders(text: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of every code block line or inline code span holding an alternative."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        spans = [line] if fenced else INLINE_CODE.findall(line)
        found += [(number, span) for span in spans if ALTERNATIVE.search(BRACKETED.sub("", span))]
    return found


def test_the_checker_finds_alternatives():
    sample = "run `make x|y` here\n```bash\nbash a.sh vanilla|braco\nls | wc -l\n```\n| a | `b \\| c` |\n`c{C}[_coef|_idct]`\n"
    assert placeholders(sample) == [(1, "make x|y"), (3, "bash a.sh vanilla|braco")]


def test_no_command_in_the_docs_pipes_by_accident():
    offending = {path.relative_to(ROOT).as_posix(): placeholders(path.read_text(encoding="utf-8")) for path in DOCS if path.is_file()}
    assert {name: found for name, found in offending.items() if found} == {}


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces become hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    fenced, found = False, set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(_anchor(line))
    return found


def test_every_relative_link_and_anchor_exists():
    broken = []
    for path in DOCS:
        for target in LINK.findall(path.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_anchor_rule():
    assert _anchor("### Back to the official code: `braco export --official`") == "back-to-the-official-code-braco-export---official"
    assert _anchor("## Upstream's public helpers") == "upstreams-public-helpers"
