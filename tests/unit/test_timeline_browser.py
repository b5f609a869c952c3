"""The timeline page in a real browser (headless Chromium): in a 1,400-px window (and a narrower one) the outcome
column is on screen, names are readable at 1,000 nodes, and folded passed nodes take no room. Without a Chromium
these tests skip, unless HPDHC_REQUIRE_BROWSER=1 (CI, `.ci/run`; `make install` installs Debian's chromium as root),
where they fail."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hyperpod_dhc.hpdhc import timeline_page as page_of

from .test_timeline import LATE_QUARANTINE, picture, thousand

REQUIRE = "HPDHC_REQUIRE_BROWSER"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# What the page's own markup is measured by: a copy gets this script (the page itself has none), which writes the
# layout into the document for --dump-dom.
PROBE = """<script>
const box = (e) => e.getBoundingClientRect();
// checkVisibility: false inside a closed <details> (laid out, not rendered)
const shown = (sel) => [...document.querySelectorAll(sel)].filter((e) => e.checkVisibility()).map(box);
const outcome = shown(".fl").concat(shown(".fo"));
const late = [...document.querySelectorAll(".row")].find((g) => g.querySelector(".nl title").textContent === LATE);
document.body.dataset.probe = JSON.stringify({
  viewport: document.documentElement.clientWidth,
  scroll: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
  outcome_left: Math.min(...outcome.map((r) => r.left)),
  outcome_right: Math.max(...outcome.map((r) => r.right)),
  name_height: Math.min(...shown(".nl").map((r) => r.height)),
  rows_shown: shown(".row").length,
  late: late ? [box(late.querySelector(".fo")).left, box(late.querySelector(".fo")).right,
                late.querySelector(".fl").textContent] : null,
});
</script>"""


def browser() -> str:
    found = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if found is None:
        why = f"no headless browser ({', '.join(BROWSERS)}) on PATH; `make install` as root installs Debian's chromium"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{why}; {REQUIRE}=1 requires one")
        pytest.skip(why)
    return found


def measure(page: str, width: int, tmp_path: Path) -> dict:
    """The page's layout in a `width` x 900 window."""
    path = tmp_path / "page.html"
    probe = PROBE.replace("LATE", json.dumps(LATE_QUARANTINE["node"]))
    path.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    args = [
        browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--window-size={width},900", "--dump-dom", path.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert found, f"no measure from {args[0]} (exit {done.returncode}): {done.stderr[-2000:]}"
    result: dict = json.loads(html.unescape(found.group(1)))
    return result


@pytest.mark.parametrize("width", [1400, 1000])
def test_the_outcome_column_is_on_screen(width, tmp_path):
    page = measure(page_of.render_html(picture()), width, tmp_path)
    assert page["scroll"] <= page["viewport"] <= width  # nothing to scroll sideways to
    assert page["outcome_right"] <= page["viewport"]
    assert page["outcome_left"] >= 0.7 * page["viewport"]  # the column on the right, not wrapped under the rows


def test_at_1000_nodes_names_are_readable_and_a_late_quarantine_shows(tmp_path):
    t = thousand()
    page = measure(page_of.render_html(t), 1400, tmp_path)
    assert page["viewport"] >= 1300 and page["scroll"] <= page["viewport"]
    assert page["name_height"] >= 10  # px: rows of 3 px had no names at all
    problems = sum(page_of.is_problem(n) for n in t.nodes)
    assert page["rows_shown"] == problems == 6  # the 994 passed ones are folded, taking no room:
    assert page["height"] < 1200  # a page and a bit, not 16,000 px
    left, right, text = page["late"]
    assert text == "quarantined" and 0.7 * page["viewport"] <= left < right <= page["viewport"]
