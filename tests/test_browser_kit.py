"""The browser kit (`browser` in conftest.py) itself: each check it offers can fail, and passes when it should.

Real Debian chromium, headless, every host blocked: what a page asks of the network reaches the kit's
recording proxy (and nowhere else), its scripts run, and a screenshot tells a drawn page from a blank one.
"""

from __future__ import annotations

import re
from pathlib import Path

PLAIN = """<!doctype html><html><head><meta charset="utf-8"><style>p{color:#333}</style></head>
<body><p>nothing to fetch</p><svg width="10" height="10"><rect width="10" height="10" fill="red"/></svg></body></html>"""

# one page, three ways out: a script and an image from a CDN (https: a CONNECT), a fetch to loopback
# (http: the whole URL).  Port 9 would not do: chromium refuses "unsafe" ports before any request.
LEAKY = """<!doctype html><html><body>
<img src="https://cdn.example.com/x.png"><script src="https://cdn.example.com/x.js"></script>
<script>fetch("http://127.0.0.1:8765/x").then(r => document.body.dataset.status = r.status,
                                             e => document.body.dataset.error = String(e));</script>
</body></html>"""

# JS adds N rows, then hides those whose text does not contain the #filter=... of the URL
ROWS = """<!doctype html><html><body><table id="t"></table><script>
const words = ["abc", "abd", "xyz", "abc2", "qq", "zabc", "foo"];
const table = document.getElementById("t");
for (const w of words) {
  const tr = document.createElement("tr"); tr.className = "row"; tr.textContent = w; table.appendChild(tr);
}
const m = location.hash.match(/filter=([^&]*)/);
if (m) for (const tr of table.rows) if (!tr.textContent.includes(m[1])) tr.hidden = true;
document.body.dataset.ran = "yes";
</script></body></html>"""

COLOURED = """<!doctype html><html><body style="margin:0;background:#fff">
<div style="width:200px;height:120px;background:#1f77b4"></div>
<svg width="100" height="100"><circle cx="50" cy="50" r="40" fill="#d62728"/></svg></body></html>"""

WHITE = """<!doctype html><html><body style="background:#fff"></body></html>"""


def page(tmp_path: Path, name: str, html: str) -> Path:
    path = tmp_path / name
    path.write_text(html, encoding="utf-8")
    return path


def test_requests_are_recorded_and_a_plain_page_makes_none(browser, tmp_path):
    dom = browser.dom(page(tmp_path, "leaky.html", LEAKY))
    assert 'data-error="TypeError' in dom  # the proxy's 403 (no CORS headers) fails the fetch
    seen = browser.requests
    assert "CONNECT cdn.example.com:443" in seen
    assert "GET http://127.0.0.1:8765/x" in seen
    assert set(seen) == {"CONNECT cdn.example.com:443", "GET http://127.0.0.1:8765/x"}, seen

    browser.clear()
    assert browser.requests == []
    dom = browser.dom(page(tmp_path, "plain.html", PLAIN))
    assert "nothing to fetch" in dom
    assert browser.requests == []


def test_scripts_run_and_the_fragment_is_honoured(browser, tmp_path):
    rows = page(tmp_path, "rows.html", ROWS)
    dom = browser.dom(rows)
    assert 'data-ran="yes"' in dom
    assert len(re.findall(r'<tr class="row"', dom)) == 7
    assert "hidden=" not in dom

    dom = browser.dom(rows, fragment="filter=abc")
    shown = re.findall(r'<tr class="row">([^<]*)</tr>', dom)
    hidden = re.findall(r'<tr class="row" hidden="">([^<]*)</tr>', dom)
    assert shown == ["abc", "abc2", "zabc"]
    assert hidden == ["abd", "xyz", "qq", "foo"]
    assert browser.requests == []


def test_screenshot_tells_a_drawn_page_from_a_blank_one(browser, tmp_path):
    drawn = browser.screenshot(page(tmp_path, "coloured.html", COLOURED), tmp_path / "coloured.png", size=(400, 300))
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not browser.is_blank(drawn)

    blank = browser.screenshot(page(tmp_path, "white.html", WHITE), tmp_path / "white.png", size=(400, 300))
    assert browser.is_blank(blank)
    assert browser.requests == []
