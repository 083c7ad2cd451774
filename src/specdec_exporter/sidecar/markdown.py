"""Markdown -> HTML for the subset docs/runbook.md is written in, with GitHub's heading anchors.

The subset: ATX headings (`#` to `####`), paragraphs, `- ` lists whose items continue on lines
indented by two spaces, pipe tables (a header row, a `|---|` row, body rows), fenced code blocks,
and inline code, `**bold**`, `*emphasis*` and `[text](url)` links. Everything is HTML-escaped;
a link keeps its `href` only for `http(s)://` URLs and `#anchors`: a link to another document
of the repository (`probe.md`) has nothing to open where the runbook is served, so it becomes
its text and the file's path (any other link: its text and its target, as code). Anything else
is written as a paragraph of its text: nothing is dropped. Pure: no I/O.
"""

from __future__ import annotations

import html
import re
from collections.abc import Generator, Iterator

Blocks = Generator[str, None, int]
"""Writes a block's HTML, returns the index of the line after it."""

_HEADING = re.compile(r"^(#{1,4}) +(.+?) *#* *$")
_LIST_ITEM = re.compile(r"^- +(.*)$")
_CONTINUATION = "  "
_TABLE_RULE = re.compile(r"^\|? *:?-{3,}:? *(\| *:?-{3,}:? *)*\|? *$")
_FENCE = "```"
_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"
    r"|\*\*(?P<strong>.+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])"
    r"|\[(?P<link_text>[^\]]+)\]\((?P<url>[^)\s]+)\)"
)
_SLUG_DROP = re.compile(r"[^\w\- ]", re.UNICODE)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text: lower case, punctuation but `-` and `_` dropped,
    spaces to `-` (`Verdict: below threshold` -> `verdict-below-threshold`)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    return _SLUG_DROP.sub("", text.strip().lower()).replace(" ", "-")


def render(markdown: str) -> str:
    """The HTML of ``markdown``'s blocks (no document wrapper)."""
    return "\n".join(_blocks(markdown.splitlines()))


def anchors(markdown: str) -> list[str]:
    """Every heading's anchor, in order, as `render` writes them."""
    return re.findall(r' id="([^"]+)"', render(markdown))


def _blocks(lines: list[str]) -> Iterator[str]:
    seen: dict[str, int] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
        elif line.startswith(_FENCE):
            index = yield from _code(lines, index)
        elif heading := _HEADING.match(line):
            level, text = len(heading.group(1)), heading.group(2)
            anchor = _unique(slug(text), seen)
            yield f'<h{level} id="{html.escape(anchor)}">{inline(text)}</h{level}>'
            index += 1
        elif _LIST_ITEM.match(line):
            index = yield from _list(lines, index)
        elif _is_table(lines, index):
            index = yield from _table(lines, index)
        else:
            index = yield from _paragraph(lines, index)


def _is_table(lines: list[str], index: int) -> bool:
    """A `|` row followed by a `|---|` rule."""
    rule = lines[index + 1] if index + 1 < len(lines) else ""
    return lines[index].startswith("|") and bool(_TABLE_RULE.match(rule))


def _unique(anchor: str, seen: dict[str, int]) -> str:
    """GitHub's rule for repeated headings: the second `x` is `x-1`, the third `x-2`."""
    count = seen.get(anchor, 0)
    seen[anchor] = count + 1
    return anchor if count == 0 else f"{anchor}-{count}"


def _code(lines: list[str], index: int) -> Blocks:
    end = index + 1
    while end < len(lines) and not lines[end].startswith(_FENCE):
        end += 1
    body = html.escape("\n".join(lines[index + 1 : end]))
    yield f"<pre><code>{body}</code></pre>"
    return end + 1


def _list(lines: list[str], index: int) -> Blocks:
    items: list[str] = []
    while index < len(lines):
        line = lines[index]
        item = _LIST_ITEM.match(line)
        if item:
            items.append(item.group(1))
        elif items and line.startswith(_CONTINUATION) and line.strip():
            items[-1] += " " + line.strip()
        else:
            break
        index += 1
    yield "<ul>\n" + "\n".join(f"<li>{inline(item)}</li>" for item in items) + "\n</ul>"
    return index


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table(lines: list[str], index: int) -> Blocks:
    header = "".join(f"<th>{inline(cell)}</th>" for cell in _cells(lines[index]))
    rows = []
    index += 2
    while index < len(lines) and lines[index].startswith("|"):
        rows.append("".join(f"<td>{inline(cell)}</td>" for cell in _cells(lines[index])))
        index += 1
    body = "\n".join(f"<tr>{row}</tr>" for row in rows)
    yield f"<table>\n<thead><tr>{header}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"
    return index


def _paragraph(lines: list[str], index: int) -> Blocks:
    start = index
    while (
        index < len(lines)
        and lines[index].strip()
        and (index == start or not _starts_a_block(lines[index]))
    ):
        index += 1
    yield f"<p>{inline(' '.join(line.strip() for line in lines[start:index]))}</p>"
    return index


def _starts_a_block(line: str) -> bool:
    return bool(
        _HEADING.match(line)
        or _LIST_ITEM.match(line)
        or line.startswith(_FENCE)
        or line.startswith("|")
    )


def inline(text: str) -> str:
    """One line of text: escaped, with code, strong, emphasis and links."""
    out: list[str] = []
    position = 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[position : match.start()]))
        out.append(_inline_element(match))
        position = match.end()
    out.append(html.escape(text[position:]))
    return "".join(out)


def _inline_element(match: re.Match[str]) -> str:
    if match.group("code"):
        return f"<code>{html.escape(match.group('code_text').strip())}</code>"
    if match.group("strong") is not None:
        return f"<strong>{inline(match.group('strong'))}</strong>"
    if match.group("em") is not None:
        return f"<em>{inline(match.group('em'))}</em>"
    text, url = match.group("link_text"), match.group("url")
    if url.startswith(("https://", "http://", "#")):
        return f'<a href="{html.escape(url, quote=True)}">{inline(text)}</a>'
    document = f"docs/{url}" if url.partition("#")[0].endswith(".md") else url
    return f"{inline(text)} (<code>{html.escape(document)}</code>)"
