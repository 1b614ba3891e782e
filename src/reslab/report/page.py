"""One document as Markdown and as a self-contained HTML page, from a list of blocks.

A sweep report (render.py) and a design card (assess/) describe their content as blocks and let
this module lay it out, so both read the same way: the answer first, beside its main figure, then
the tables across the page's width, folded columns behind a click.

Block kinds (tuples; text is plain text, escaped here):
    ("h1", text) | ("h2", text) | ("p", text)
    ("ul", [text, ...])
    ("table", headers, rows, align)   align: one "l" or "r" per column (right: numbers)
    ("img", title, file)              file relative to the page's folder
    ("lead", lines, counts, figure)   the headline: `counts` (a short line such as "3 reproduced ·
                                      1 inconclusive", or None), then `lines`, each a text or a
                                      (label, text) pair whose label is set in bold; `figure` is
                                      (title, file) or None. In HTML the figure stands beside the
                                      text (two columns that stack below ~1000 px wide).
    ("details", summary, [blocks])    folded content: a <details> in HTML, whose `summary` is the
                                      click target; in Markdown the summary as a paragraph, then
                                      the blocks, unfolded (Markdown has no folding).

page_markdown(blocks) -> str; page_html(title, blocks, folder) -> str (every figure embedded as a
data: URI, so the page needs no network and no neighbouring files); check_html(text) -> the
problems of a page, [] when fine; require_valid_html(text) raises on any.
"""

from __future__ import annotations

import base64
import html
import re
from html.parser import HTMLParser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}
_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
         ".gif": "image/gif", ".webp": "image/webp"}
_EXTERNAL = re.compile(r"https?://", re.IGNORECASE)
KINDS = ("h1", "h2", "p", "ul", "table", "img", "lead", "details")


def _lead_line(line) -> tuple[str | None, str]:
    if isinstance(line, (tuple, list)):
        return str(line[0]), str(line[1])
    return None, str(line)


# ---- Markdown ------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _md_img(title: str, file: str) -> str:
    return f"![{title.replace('[', '(').replace(']', ')')}]({file.replace(' ', '%20')})"


def _md_block(block: tuple) -> list[str]:
    kind = block[0]
    if kind == "h1":
        return [f"# {block[1]}"]
    if kind == "h2":
        return [f"## {block[1]}"]
    if kind == "p":
        return [str(block[1])]
    if kind == "ul":
        return ["\n".join(f"- {_md_cell(i)}" for i in block[1])]
    if kind == "table":
        _, headers, rows, align = block
        lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
                 "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|"]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        return ["\n".join(lines)]
    if kind == "img":
        return [_md_img(str(block[1]), str(block[2]))]
    if kind == "lead":
        _, lines, counts, figure = block
        out = [str(counts)] if counts else []
        items = []
        for line in lines:
            label, text = _lead_line(line)
            items.append("- " + (f"**{_md_cell(label)}** " if label else "") + _md_cell(text))
        if items:
            out.append("\n".join(items))
        if figure:
            out.append(_md_img(str(figure[0]), str(figure[1])))
        return out
    if kind == "details":
        return [str(block[1])] + [part for inner in block[2] for part in _md_block(inner)]
    raise ValueError(f"page: unknown block kind {kind!r} (known: {', '.join(KINDS)})")


def page_markdown(blocks: list[tuple]) -> str:
    return "\n\n".join(part for block in blocks for part in _md_block(block)) + "\n"


# ---- HTML ----------------------------------------------------------------------------------------
# The headline's figure keeps its own size up to 770 px (plots.py draws 7 in at 110 dpi; a scaled plot
# blurs), or 62% of the page where that is more; the text keeps at least 360 px. Below 1000 px the
# two stack. The page uses the window's width (up to 1360 px). A number never breaks inside its cell, so a
# table too wide for the page narrows its text columns and wraps its headers (a report's stay within
# two lines at 1400 px: tests/test_report_layout.py); one wider still scrolls inside its own box.
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1360px;margin:1.2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin:.2em 0 .3em}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
.lead{display:flex;gap:2em;align-items:flex-start;margin:1em 0 1.5em}
.lead .answer{flex:1 1 360px;min-width:360px}
.lead figure{flex:0 1 auto;min-width:0;max-width:max(62%,770px);margin:0}
.lead .counts{font-size:1.2em;font-weight:600;margin:.2em 0 .5em}
.lead ul{margin:0;padding-left:1.2em}.lead li{margin:.35em 0}
@media (max-width:1000px){.lead{display:block}.lead figure{width:auto;margin-top:1em}}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em}th{background:#f3f3f3}
td.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
details{margin:.5em 0 1em}summary{cursor:pointer;color:#335}
figure{margin:1.5em 0}img{max-width:100%;height:auto}figcaption{color:#555;font-size:.9em}
.missing{color:#a00;border:1px dashed #a00;padding:.5em}
"""


def _img_html(title: str, file: str, folder: Path) -> str:
    e = html.escape
    path = Path(folder) / file
    try:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return f'<p class="missing">Figure “{e(title)}” is missing: {e(file)} could not be read.</p>'
    mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
    return (f'<figure><img src="data:{mime};base64,{data}" alt="{e(title, quote=True)}">'
            f"<figcaption>{e(title)}</figcaption></figure>")


def _table_html(headers, rows, align) -> str:
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in headers)
    cls = {"l": "<td>", "r": '<td class="r">'}
    body = "".join("<tr>" + "".join(f"{cls[a]}{e(str(c))}</td>" for c, a in zip(row, align))
                   + "</tr>\n" for row in rows)
    return (f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n'
            "</table></div>")


def _lead_html(lines, counts, figure, folder: Path) -> str:
    e = html.escape
    answer = f'<p class="counts">{e(str(counts))}</p>' if counts else ""
    items = []
    for line in lines:
        label, text = _lead_line(line)
        items.append("<li>" + (f"<strong>{e(label)}</strong> " if label else "") + f"{e(text)}</li>")
    if items:
        answer += "<ul>" + "".join(items) + "</ul>"
    side = _img_html(str(figure[0]), str(figure[1]), folder) if figure else ""
    return f'<section class="lead"><div class="answer">{answer}</div>{side}</section>'


def _html_block(block: tuple, folder: Path) -> str:
    e = html.escape
    kind = block[0]
    if kind in ("h1", "h2", "p"):
        return f"<{kind}>{e(str(block[1]))}</{kind}>"
    if kind == "ul":
        return "<ul>" + "".join(f"<li>{e(str(i))}</li>" for i in block[1]) + "</ul>"
    if kind == "table":
        return _table_html(*block[1:])
    if kind == "img":
        return _img_html(block[1], block[2], folder)
    if kind == "lead":
        return _lead_html(*block[1:], folder)
    if kind == "details":
        inner = "\n".join(_html_block(b, folder) for b in block[2])
        return f"<details><summary>{e(str(block[1]))}</summary>\n{inner}\n</details>"
    raise ValueError(f"page: unknown block kind {kind!r} (known: {', '.join(KINDS)})")


def page_html(title: str, blocks: list[tuple], folder: Path) -> str:
    """The page; `folder` is where the blocks' figure files are read from (to embed them)."""
    body = "\n".join(_html_block(b, Path(folder)) for b in blocks)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(str(title))}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + body + "\n</body>\n</html>\n")


# ---- structural check ----------------------------------------------------------------------------
class _Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, tuple[int, int]]] = []
        self.problems: list[str] = []
        self._in_style = False

    def _attrs(self, tag: str, attrs) -> None:
        line = self.getpos()[0]
        for name, value in attrs:
            if value and _EXTERNAL.search(value):
                self.problems.append(f"line {line}: <{tag} {name}=...> refers to an external URL")
        if tag == "img":
            src = dict(attrs).get("src") or ""
            if not src.startswith("data:"):
                self.problems.append(f"line {line}: <img> src is not a data: URI ({src[:60]!r})")

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)

    def handle_endtag(self, tag):
        self._in_style = False
        line = self.getpos()[0]
        if tag in VOID:
            return
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()
            return
        if any(t == tag for t, _ in self.stack):
            while self.stack[-1][0] != tag:
                t, pos = self.stack.pop()
                self.problems.append(f"line {line}: </{tag}> closes <{t}> (line {pos[0]}) "
                                     "that was never closed (misnested)")
            self.stack.pop()
        else:
            self.problems.append(f"line {line}: </{tag}> has no matching open tag")

    def handle_data(self, data):
        if self._in_style and _EXTERNAL.search(data):
            self.problems.append(f"line {self.getpos()[0]}: the style sheet refers to an external URL")


def check_html(text: str) -> list[str]:
    """Problems of an HTML page: unbalanced or misnested tags (void elements excepted), <img>
    whose src is not a data: URI, and any http(s):// URL in an attribute or in a <style> sheet
    (plain text that mentions a URL is not a reference and is allowed). [] = fine."""
    checker = _Checker()
    checker.feed(text)
    checker.close()
    checker.problems += [f"<{t}> opened at line {pos[0]} is never closed" for t, pos in checker.stack]
    return checker.problems


def require_valid_html(text: str) -> None:
    """Raise RuntimeError naming the first problems of a page this package wrote: a page that fails
    check_html is a bug in reslab, never the user's input, so nothing should be written from it."""
    problems = check_html(text)
    if problems:
        raise RuntimeError("reslab bug: the HTML report fails its structural check: "
                           + "; ".join(problems[:10]))
