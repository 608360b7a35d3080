"""The dashboard in real Chromium (Playwright): one tile per GPU, views change the picture, access control.

The demo server runs in a thread with its stepper off, so the cluster holds
still while the page is checked. Screenshots go to out/test-artifacts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from app_server import serving
from dashboard_browser import chromium, shot
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.telemetry.xid import xid_meaning

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Any]]:
    """A demo server on a free port: (base URL, demo)."""
    demo = build_demo(DemoOptions(history_s=1800.0))
    with serving(create_app(demo, run_stepper=False)) as url:
        yield url, demo


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _open(browser: Any, base: str, token: str, hash_args: str = "") -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{base}/#token={token}{hash_args}")
    page.wait_for_selector("body[data-ready=true]", timeout=20_000)
    return page


def test_one_tile_per_gpu_and_views_change_the_picture(server: tuple[str, Any], browser: Any) -> None:
    base, demo = server
    page = _open(browser, base, demo.tokens.token_of("operator"))
    gpus = demo.sim.nodes.total_gpus
    assert page.evaluate("window.loadmaster.tileCount()") == gpus
    assert page.get_attribute("#tiles", "data-tiles") == str(gpus)
    assert page.get_attribute("#tiles", "data-gpus") == str(gpus)
    shot(page, "operator-state")
    by_state = page.evaluate("window.loadmaster.canvasHash()")

    page.select_option("#colour", "util")
    page.wait_for_selector("#tiles[data-colour=util]")
    assert page.evaluate("window.loadmaster.tileCount()") == gpus
    by_util = page.evaluate("window.loadmaster.canvasHash()")
    assert by_util != by_state
    shot(page, "operator-util")

    page.select_option("#layout", "user")
    page.wait_for_selector("#tiles[data-layout=user]")
    assert page.evaluate("window.loadmaster.tileCount()") == gpus
    assert page.evaluate("window.loadmaster.canvasHash()") != by_util
    page.close()


def test_clicking_a_node_opens_its_gpus(server: tuple[str, Any], browser: Any) -> None:
    base, demo = server
    page = _open(browser, base, demo.tokens.token_of("operator"))
    node = demo.sim.nodes.nodes[0]
    point = page.evaluate(f"window.loadmaster.nodeTile({node.name!r})")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector(f"#node-panel[data-node='{node.name}']")
    assert page.locator("#node-panel [data-testid=node-gpu]").count() == node.gpus
    shot(page, "node-panel")
    page.close()


def test_user_sees_own_job_and_is_refused_anothers(server: tuple[str, Any], browser: Any) -> None:
    base, demo = server
    users = [p.name for _, p in demo.tokens.principals() if not p.is_operator]
    user = users[0]
    running = demo.sim.cluster.running.values()
    own = next(r.job.id for r in running if r.job.user == user)
    other = next(r.job.id for r in running if r.job.user != user)
    page = _open(browser, base, demo.tokens.token_of(user))
    assert page.evaluate("window.loadmaster.tileCount()") == demo.sim.nodes.total_gpus
    page.click("#tabs button[data-view=me]")
    page.wait_for_selector("[data-testid=my-job]")
    shot(page, "user-me")

    page.evaluate(f"window.loadmaster.openJob({own!r})")
    page.wait_for_selector("[data-testid=job-title]")
    assert own in page.inner_text("[data-testid=job-title]")
    page.wait_for_selector("[data-testid=sparkline]")
    shot(page, "user-own-job")

    page.evaluate(f"window.loadmaster.openJob({other!r})")
    page.wait_for_selector("#job-info .error[data-status='403']")
    shot(page, "user-other-job-403")
    assert page.locator("#tabs button[data-view=operator]").is_hidden()
    page.close()

    # the link `loadmaster status` prints opens the job's page directly
    linked = _open(browser, base, demo.tokens.token_of(user), hash_args=f"&job={quote(own, safe='')}")
    linked.wait_for_selector("[data-testid=job-title]")
    assert own in linked.inner_text("[data-testid=job-title]")
    linked.close()


def test_operator_sees_reclaim_table_and_job_page_shows_findings(
    server: tuple[str, Any], browser: Any
) -> None:
    base, demo = server
    page = _open(browser, base, demo.tokens.token_of("operator"))
    page.click("#tabs button[data-view=operator]")
    page.wait_for_selector("[data-testid=reclaim-row]", timeout=20_000)
    rows = page.locator("[data-testid=reclaim-row]")
    assert rows.count() > 0
    idle_row = next(r for r in rows.all() if "idle" in r.locator("td").last.inner_text())
    assert "GPUs of" in idle_row.inner_text()
    shot(page, "operator-reclaim")

    job = idle_row.locator("a[data-job]").get_attribute("data-job")
    page.evaluate(f"window.loadmaster.openJob({job!r})")
    page.wait_for_selector("[data-testid=job-findings][data-count]", timeout=20_000)
    findings = page.locator("[data-testid=finding]")
    assert findings.count() > 0
    assert "idle" in [f.get_attribute("data-kind") for f in findings.all()]
    assert len(findings.first.locator("td").all()) == 5  # kind, targets, interval, evidence, confidence
    shot(page, "job-findings")
    page.close()


def test_signed_out_page_hides_the_operator_tab_and_operators_read_xid_meanings(
    server: tuple[str, Any], browser: Any
) -> None:
    base, demo = server
    signed_out = browser.new_page(viewport={"width": 1400, "height": 1000})
    signed_out.goto(base)
    signed_out.wait_for_selector("#login:not([hidden])", timeout=20_000)
    assert signed_out.locator("#tabs button[data-view=operator]").is_hidden()
    signed_out.close()
    page = _open(browser, base, demo.tokens.token_of("operator"))
    page.click("#tabs button[data-view=operator]")
    page.wait_for_selector("[data-testid=reclaim-row]", timeout=20_000)
    rows = [
        [td.inner_text() for td in r.locator("td").all()]
        for r in page.locator("[data-testid=unhealthy]").all()
    ]
    assert rows and all(row[3] for row in rows)  # every unhealthy GPU says why, not a badge bit
    for _, _, xid, meaning in rows:  # XID code and its meaning, or the double-bit ECC errors
        assert xid_meaning(int(xid)) in meaning if xid else "double-bit ECC" in meaning
    header = page.locator("#reclaim table tr").first.inner_text()
    assert "idle for" in header and "wasted GPU-h" in header
    wasted = [
        float(r.locator("td").nth(5).inner_text()) for r in page.locator("[data-testid=reclaim-row]").all()
    ]
    assert wasted == sorted(wasted, reverse=True)  # ranked by wasted GPU-hours
    shot(page, "operator-unhealthy")
    page.close()
