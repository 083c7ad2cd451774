"""The demo's runbook links open: a real `demo` run, its live page fetched, and every runbook link
of that page followed to the sidecar's /runbook and the anchor it names."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.parse

import httpx


def test_every_runbook_link_of_the_demos_live_page_opens() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "specdec_exporter.cli", "demo", "--duration", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        page_url = None
        for line in process.stdout:  # the first frame names the live page
            found = re.search(r"live page: (http://127\.0\.0\.1:\d+/)", line)
            if found:
                page_url = found.group(1)
                break
        assert page_url is not None
        page = httpx.get(page_url, timeout=10).text
        links = {
            urllib.parse.urljoin(page_url, href)
            for href in re.findall(r"href='([^']+)'", page)
            if "runbook" in href
        }
        assert links, "the demo's page links no runbook"
        for link in links:
            parts = urllib.parse.urlsplit(link)
            assert parts.netloc == urllib.parse.urlsplit(page_url).netloc, link
            response = httpx.get(link, timeout=10)
            assert response.status_code == 200, link
            if parts.fragment:
                assert f'id="{parts.fragment}"' in response.text, link
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=60)
