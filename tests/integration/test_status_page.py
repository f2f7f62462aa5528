"""The status page in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
it shows the cluster's bookies, a bookie killed with -9 turns red within 10 s, and the
under-replicated count goes down to 0 while AutoRecovery heals. Screenshots of the three
moments go to ``$BK_SCREENSHOTS`` (the README's are made so) or the test's tmp dir."""

from __future__ import annotations

import os
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from bk_spark.core.client import BookKeeper
from bk_spark.io.registration import list_bookies
from bk_spark.io.underreplication import UnderReplicationManager

CHROMIUM = "/usr/bin/chromium"  # Debian's (make test installs it); no Playwright download
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
RED = "rgb(176, 0, 32)"


def test_status_page_shows_bookies_a_killed_one_in_red_and_healing_to_zero(
        cluster_factory, metadata_uri, tmp_path):
    shots = Path(os.environ.get("BK_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    c = cluster_factory(3, extra_args=["--http-port", "0", "--lost-bookie-recovery-delay", "0"])
    ports = {b.bookie_id: b.info["http_port"] for b in list_bookies(metadata_uri)}
    with BookKeeper(metadata_uri) as bk:
        urm = UnderReplicationManager(bk.zk, bk.msu.root)
        deadline = time.monotonic() + 20
        while urm.auditor() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        auditor = urm.auditor()
        urm.set_enabled(False)  # workers paused: the marks are seen before they are healed
        ledgers = []
        for _ in range(12):  # empty password: AutoRecovery's workers heal these
            lh = bk.create_ledger(2, 2, 2)
            for i in range(20):
                lh.add_entry(b"entry %d" % i)
            lh.close()
            ledgers.append(lh.metadata)
    served = sorted(ports)[0]
    # the victim: neither the bookie serving the page nor the Auditor, and in some ensemble
    victim = next(b for b in c.bookies if b.bookie_id not in (served, auditor)
                  and any(b.bookie_id in md.last_ensemble for md in ledgers))
    url = f"http://127.0.0.1:{ports[served]}/"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            rows = page.locator("#bookies tbody tr")
            rows.nth(2).wait_for(timeout=10_000)
            assert rows.count() == 3
            assert page.locator("#problem-list li").first.inner_text().startswith("none")
            # keyboard: the first Tab reaches the skip link, Enter moves to the problems
            page.keyboard.press("Tab")
            assert page.evaluate("document.activeElement.className") == "skip"
            page.keyboard.press("Enter")
            assert page.evaluate("document.activeElement.id") == "problems"
            page.screenshot(path=str(shots / "status-before.png"), full_page=True)

            victim.kill()  # kill -9
            killed_at = time.monotonic()
            row = page.locator(f'#bookies tbody tr[data-bookie="{victim.bookie_id}"]'
                               f'[data-state="down"]')
            row.wait_for(timeout=10_000)
            assert time.monotonic() - killed_at < 10
            assert row.locator("td").first.evaluate("e => getComputedStyle(e).color") == RED
            assert victim.bookie_id in page.locator("#problem-list").inner_text()
            assert f"bk recover {victim.bookie_id}" in page.locator("#problem-list").inner_text()

            # the Auditor marks the victim's ledgers once its session expired (~10 s)
            under = page.locator("#ar-under")
            page.wait_for_function("Number(document.getElementById('ar-under').textContent) > 0",
                                   timeout=30_000)
            assert under.evaluate("e => getComputedStyle(e).color") == RED
            page.screenshot(path=str(shots / "status-during.png"), full_page=True)
            with BookKeeper(metadata_uri) as bk:
                UnderReplicationManager(bk.zk, bk.msu.root).set_enabled(True)
            seen: list[int] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                n = int(under.inner_text())
                if not seen or seen[-1] != n:
                    seen.append(n)
                if n == 0:
                    break
                time.sleep(0.1)
            assert seen[0] > 0 and seen[-1] == 0, seen
            assert seen == sorted(seen, reverse=True), seen  # it counts down
            page.wait_for_function("document.getElementById('ar-progress-text').textContent"
                                   f".includes('all {seen[0]} ledgers re-replicated')")
            page.screenshot(path=str(shots / "status-after.png"), full_page=True)
        finally:
            browser.close()
    with BookKeeper(metadata_uri) as bk:
        for md in ledgers:
            assert victim.bookie_id not in bk.ledger_metadata(md.ledger_id).last_ensemble
