"""The fenced code blocks of README.md and docs/**/*.md, and how each one is checked.

A block is *run* (python, bash/sh, console, js/mjs), *parsed* (toml, json) or *shown*
(`output`: the expected stdout of the block before it; `text`: a drawing, not code). A
block that cannot run in tests says so on its first, visible line: `# not run: <reason>`
(python, bash, console, toml) or `// not run: <reason>` (js, ts); it is still checked for
syntax where a checker is at hand. Any other language is an error, so no block goes
unchecked by accident.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]

RUN = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "console": "console"}
RUN |= {"js": "js", "javascript": "js", "mjs": "js"}
PARSE = {"toml", "json"}
SHOWN = {"output", "text"}
NOT_RUN_COMMENT = {"python": "#", "bash": "#", "console": "#", "toml": "#", "js": "//"}
NOT_RUN_COMMENT |= {"ts": "//", "typescript": "//", "dockerfile": "#", "ini": "#"}
_MARKER = re.compile(r"^(#|//) not run: \S")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # normalized: python, bash, console, js, ts, toml, json, output, text
    text: str
    title: str | None  # `title="app.py"`: the block is that file, written before it runs

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def not_run_reason(self) -> str | None:
        first = self.text.split("\n", 1)[0].strip()
        if _MARKER.match(first):
            return first.split("not run:", 1)[1].strip()
        return None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _normalize(lang: str) -> str:
    lang = lang.lower()
    if lang in RUN:
        return RUN[lang]
    return {"typescript": "ts", "ts": "ts", "tsx": "ts"}.get(lang, lang)


def blocks_of(page: Path) -> list[Block]:
    found = []
    for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        if token.type != "fence" or token.map is None:
            continue
        words = shlex.split(token.info) if token.info.strip() else [""]
        title = None
        for word in words[1:]:
            if word.startswith("title="):
                title = word.removeprefix("title=")
        found.append(Block(page, token.map[0] + 1, _normalize(words[0]), token.content, title))
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks_of(page)]


def problem(block: Block) -> str | None:
    """Why a block can be neither run nor parsed nor shown, or None."""
    if block.lang in SHOWN or block.lang in PARSE:
        return None
    if block.lang in NOT_RUN_COMMENT and block.not_run_reason is not None:
        return None
    if block.lang in RUN.values():
        return None
    if not block.lang:
        return "a fence without a language: name it (python, bash, console, text, output, ...)"
    comment = NOT_RUN_COMMENT.get(block.lang, "#")
    return (
        f"no runner for {block.lang!r} blocks: start it with '{comment} not run: <reason>' "
        "or give tests/docs a runner for it"
    )
