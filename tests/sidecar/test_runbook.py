"""/runbook: the packaged docs/runbook.md as HTML, every anchor the live page and the alerts link
to present; and the subset-of-Markdown renderer it is made with, on literal inputs."""

from __future__ import annotations

import html
import re
import sys
import urllib.parse
from pathlib import Path

import httpx
import pytest
from prometheus_client.registry import CollectorRegistry
from test_page import polled

from specdec_exporter.core.model import DraftCost
from specdec_exporter.sidecar import markdown
from specdec_exporter.sidecar.app import create_app
from specdec_exporter.sidecar.config import Settings
from specdec_exporter.sidecar.explain import (
    BUCKET_SECTIONS,
    MODEL_SECTIONS,
    VLLM_DOWN_SECTION,
    VLLM_NEVER_UP_SECTION,
    PageContext,
)
from specdec_exporter.sidecar.poller import PollState
from specdec_exporter.sidecar.runbook import RUNBOOK_PATH
from variants import capture

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from specdec_artifacts.rules import alerting_rules  # noqa: E402
from specdec_artifacts.settings import load  # noqa: E402

pytestmark = pytest.mark.anyio
SIDECAR = "http://sidecar/"


async def get(state: PollState, path: str, context: PageContext) -> httpx.Response:
    app = create_app(
        CollectorRegistry(), state, lambda: None, "http://vllm:8000", refresh_every=5, page=context
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=SIDECAR) as client:
        return await client.get(path)


def ids(page: str) -> set[str]:
    return set(re.findall(r' id="([^"]+)"', page))


async def test_the_sidecar_serves_the_shipped_runbook_with_an_anchor_per_alert_and_verdict() -> (
    None
):
    response = await get(PollState(), RUNBOOK_PATH, PageContext())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    anchors = ids(response.text)
    alerts = {rule["alert"].lower() for rule in alerting_rules(load())}
    verdicts = {"verdict-" + v.replace(" ", "-") for v in ("healthy", "borderline")}
    verdicts |= {"verdict-below-threshold", "verdict-disable", "verdict-not-drafting"}
    assert alerts | verdicts | {"decision-table", "verdict-not-enabled"} <= anchors


def test_the_packaged_runbook_is_docs_runbook() -> None:
    packaged = ROOT / "src" / "specdec_exporter" / "sidecar" / "runbook.md"
    assert packaged.read_text() == (ROOT / "docs" / "runbook.md").read_text()


async def follow(page: str, state: PollState, context: PageContext) -> list[str]:
    """Every runbook link of ``page``, resolved against the page's URL and opened: the ones
    whose fragment the opened page lacks."""
    hrefs = re.findall(r"href='([^']+)'", page)
    links = [urllib.parse.urljoin(SIDECAR, h) for h in hrefs if "runbook" in h]
    assert links, "the page links no runbook"
    missing = []
    for link in links:
        parts = urllib.parse.urlsplit(link)
        assert parts.path == RUNBOOK_PATH, link
        response = await get(state, parts.path, context)
        assert response.status_code == 200, link
        if parts.fragment and parts.fragment not in ids(response.text):
            missing.append(link)
    return missing


async def test_every_runbook_link_of_the_default_page_opens_its_section() -> None:
    """The live page without --runbook-url, healthy and then a net loss (a section link): each
    link, followed from the page's own URL, opens the sidecar's /runbook at an existing anchor."""
    context = PageContext.of(Settings())
    for cost in (DraftCost(0.1, "default"), DraftCost(0.9, "flag", "eagle3")):
        poller, _ = await polled([capture("t0"), capture("t3")], cost)
        page = await get(poller.state, "/", PageContext(cost, runbook_url=context.runbook_url))
        assert await follow(page.text, poller.state, context) == []


async def test_every_section_the_page_and_the_alerts_can_link_has_its_anchor() -> None:
    served = ids((await get(PollState(), RUNBOOK_PATH, PageContext())).text)
    page_sections = {*MODEL_SECTIONS.values(), *BUCKET_SECTIONS.values()}
    page_sections |= {VLLM_DOWN_SECTION, VLLM_NEVER_UP_SECTION}
    for section in page_sections:
        assert PageContext().runbook(section).partition("#")[2] in served, section
    for rule in alerting_rules(load()):
        assert rule["annotations"]["runbook_url"].partition("#")[2] in served, rule["alert"]


# The renderer, on literal inputs.


def test_headings_get_githubs_anchors_and_repeats_a_suffix() -> None:
    html = markdown.render(
        "# Runbook: alerts\n\n## SpecDecodeX\n\n### Verdict: below threshold\n\n## SpecDecodeX\n"
    )
    assert html.splitlines() == [
        '<h1 id="runbook-alerts">Runbook: alerts</h1>',
        '<h2 id="specdecodex">SpecDecodeX</h2>',
        '<h3 id="verdict-below-threshold">Verdict: below threshold</h3>',
        '<h2 id="specdecodex-1">SpecDecodeX</h2>',
    ]


def test_a_list_item_continues_on_indented_lines_and_inline_markup_renders() -> None:
    text = (
        "- *Draft cost c*: where did c come from? `method` or\n"
        "  `default` is an **assumption**; see [probe.md](probe.md), [up](#decision-table)\n"
        "- `a*b` < `c`\n"
        "next paragraph, https://x.example/ and [site](https://x.example/a?b=1&c=2)\n"
    )
    assert markdown.render(text).splitlines() == [
        "<ul>",
        "<li><em>Draft cost c</em>: where did c come from? <code>method</code> or "
        "<code>default</code> is an <strong>assumption</strong>; see probe.md "
        '(<code>docs/probe.md</code>), <a href="#decision-table">up</a></li>',
        "<li><code>a*b</code> &lt; <code>c</code></li>",
        "</ul>",
        "<p>next paragraph, https://x.example/ and "
        '<a href="https://x.example/a?b=1&amp;c=2">site</a></p>',
    ]


def test_a_table_a_fence_and_hostile_text_are_escaped_never_dropped() -> None:
    text = (
        "| a, t | alert |\n|---|---|\n| a < t | <b>X</b> |\n\n"
        "```sh\nkubectl logs <pod> | grep '\"x\"'\n```\n"
        "[click](javascript:alert(1)) <script>x</script>\n"
    )
    assert markdown.render(text).splitlines() == [
        "<table>",
        "<thead><tr><th>a, t</th><th>alert</th></tr></thead>",
        "<tbody>",
        "<tr><td>a &lt; t</td><td>&lt;b&gt;X&lt;/b&gt;</td></tr>",
        "</tbody>",
        "</table>",
        "<pre><code>kubectl logs &lt;pod&gt; | grep &#x27;&quot;x&quot;&#x27;</code></pre>",
        "<p>click (<code>javascript:alert(1</code>)) &lt;script&gt;x&lt;/script&gt;</p>",
    ]


def test_every_word_of_the_runbook_reaches_the_page() -> None:
    """Nothing of docs/runbook.md is lost: each word of it (markup aside) is in the HTML text."""
    source = (ROOT / "docs" / "runbook.md").read_text()
    rendered = re.sub(r"<[^>]+>", " ", markdown.render(source))
    text = html.unescape(rendered)
    words = set(re.findall(r"[A-Za-z][A-Za-z0-9_]{3,}", re.sub(r"\]\([^)]*\)", "]", source)))
    assert {w for w in words if w not in text} == set()
