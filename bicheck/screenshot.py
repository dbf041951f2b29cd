"""Screenshots of Superset charts in headless Chromium (run with the Superset venv's Python).

    python bicheck/screenshot.py SUPERSET_URL OUT_DIR [--sqllab DATABASE_ID SQL] CHART_ID [CHART_ID …]

Playwright drives Debian's /usr/bin/chromium (no browser download): it logs in as the bi-check
admin, opens each chart's Explore view, waits until the chart has rendered, and saves
``OUT_DIR/superset_chart_<n>.png`` (n = 1, 2, … in the order given).  With ``--sqllab DB SQL`` it
also opens SQL Lab on that database with SQL run at once (its ``?dbid=…&sql=…&autorun=true`` URL)
and saves ``OUT_DIR/superset_sqllab.png`` once the result grid is shown.  Prints each file written.
"""

from __future__ import annotations

import shutil
import sys
import urllib.parse

from playwright.sync_api import sync_playwright

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def main(argv: list[str]) -> int:
    sqllab = None
    if "--sqllab" in argv:
        at = argv.index("--sqllab")
        sqllab = (argv[at + 1], argv[at + 2])
        argv = argv[:at] + argv[at + 3:]
    url, out, *ids = argv
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.goto(f"{url}/login/", wait_until="networkidle", timeout=120_000)
        page.fill("input#username, input[name=username]", "admin")
        page.fill("input#password, input[name=password]", "admin")
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_load_state("networkidle", timeout=120_000)
        for n, chart in enumerate(ids, 1):
            page.goto(f"{url}/explore/?slice_id={chart}", wait_until="networkidle", timeout=180_000)
            # the query runs (“Waiting on dpsql”), then the chart draws: an ECharts canvas or table rows
            page.wait_for_function("() => !document.body.innerText.includes('Waiting on')", timeout=180_000)
            page.wait_for_selector(".chart-container canvas, .chart-container table tbody tr", timeout=180_000)
            page.wait_for_timeout(2000)   # let the chart's animation finish
            path = f"{out}/superset_chart_{n}.png"
            page.screenshot(path=path, full_page=False)
            print(path)
        if sqllab is not None:
            query = urllib.parse.urlencode({"dbid": sqllab[0], "schema": "public", "autorun": "true",
                                            "sql": sqllab[1]})
            page.goto(f"{url}/sqllab/?{query}", wait_until="networkidle", timeout=180_000)
            # the result grid's header names every column dpsql sent
            try:
                page.wait_for_selector("text=count_ci95", timeout=180_000)
            except Exception:
                page.screenshot(path=f"{out}/superset_sqllab_failed.png", full_page=False)
                raise
            page.wait_for_timeout(1500)
            path = f"{out}/superset_sqllab.png"
            page.screenshot(path=path, full_page=False)
            print(path)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
