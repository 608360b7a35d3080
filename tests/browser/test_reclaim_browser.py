"""The reclaim ledger in real Chromium (Playwright): an operator approves a notice and undoes the
approval from the dashboard, the server's reclaim loop sees both; a user has no ledger and sees the
notices of their own jobs only.

The demo server runs in a thread with its stepper off; the reclaim loop has looked once, so the ledger
holds the policy's notices. Screenshots go to out/test-artifacts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from app_server import serving
from conftest import system_tool
from loadmaster.scheduling.reclaim import LedgerEntry, ReclaimPolicy
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.demo import Demo
from loadmaster.serve.reclaimloop import ReclaimLoop
from loadmaster.serve.state import StateStore

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Demo, ReclaimLoop]]:
    """A demo server whose reclaim loop has noticed the idle jobs: (base URL, demo, loop)."""
    demo = build_demo(DemoOptions(history_s=3600.0))
    loop = ReclaimLoop([ReclaimPolicy(idle_after_s=600, grace_s=3600)], StateStore(), interval_s=60)
    assert loop.step(demo), "the demo should have idle jobs to notice"
    app = create_app(demo, run_stepper=False, state=loop.state, reclaim=loop)
    with serving(app) as url:
        yield url, demo, loop


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    system_tool("chromium", CHROMIUM)  # missing: the test fails (never skips), naming the install command
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _open(browser: Any, base: str, token: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{base}/#token={token}")
    page.wait_for_selector("body[data-ready=true]", timeout=20_000)
    return page


def _rows(page: Any, action: str) -> Any:
    return page.locator(f"#ledger [data-testid=ledger-row][data-action='{action}']")


def test_an_operator_approves_then_undoes_from_the_dashboard(
    server: tuple[str, Demo, ReclaimLoop], browser: Any
) -> None:
    base, demo, loop = server
    page = _open(browser, base, demo.tokens.token_of("operator"))
    page.click("#tabs button[data-view=operator]")
    page.wait_for_selector("#ledger [data-testid=ledger-row]", timeout=20_000)
    notices = _rows(page, "notify (dry run)")
    assert notices.count() == len(loop.state.ledger())
    job = notices.first.get_attribute("data-job")
    assert notices.first.locator("button[data-act=undo]").count() == 0  # a notice cannot be undone

    notices.first.locator("button[data-act=approve]").click()
    page.wait_for_selector("#ledger [data-testid=ledger-row][data-action=approve]", timeout=10_000)
    approved = _rows(page, "approve").first
    assert approved.get_attribute("data-job") == job
    assert "operator" in approved.inner_text()
    assert job in loop.tracker.approved
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-ledger-approved.png"), full_page=True)

    approved.locator("button[data-act=undo]").click()
    page.wait_for_selector("#ledger [data-testid=ledger-row][data-action=undo]", timeout=10_000)
    assert _rows(page, "undo").first.get_attribute("data-job") == job
    assert job not in loop.tracker.approved
    actions = [e.action for e in loop.state.ledger(job=job)]
    assert actions[:2] == ["undo", "approve"]

    assert _rows(page, "undo").first.locator("button").count() == 0  # an undo has no further action
    page.close()


def _operator_view(browser: Any, base: str, demo: Demo) -> Any:
    page = _open(browser, base, demo.tokens.token_of("operator"))
    page.click("#tabs button[data-view=operator]")
    page.wait_for_selector("#ledger [data-testid=ledger-row]", timeout=20_000)
    return page


def test_a_refused_action_is_shown_not_swallowed(server: tuple[str, Demo, ReclaimLoop], browser: Any) -> None:
    base, demo, loop = server
    stale = _operator_view(browser, base, demo)  # opened before another operator exempts the job
    fresh = _operator_view(browser, base, demo)
    job = _rows(fresh, "notify (dry run)").nth(1).get_attribute("data-job")
    fresh.locator(
        f"#ledger [data-action='notify (dry run)'][data-job='{job}'] button[data-act=exempt]"
    ).click()
    fresh.wait_for_selector(f"#ledger [data-action=exempt][data-job='{job}']", timeout=10_000)
    assert job in loop.tracker.exempted
    stale.locator(
        f"#ledger [data-action='notify (dry run)'][data-job='{job}'] button[data-act=approve]"
    ).click()
    stale.wait_for_selector("#ledger-error:not([hidden])", timeout=10_000)
    assert "no pending reclaim action" in stale.inner_text("#ledger-error")
    assert job not in loop.tracker.approved
    stale.close()
    fresh.close()


def test_a_user_has_no_ledger_and_sees_only_their_own_notices(
    server: tuple[str, Demo, ReclaimLoop], browser: Any
) -> None:
    base, demo, loop = server
    users = {p.name for _, p in demo.tokens.principals() if not p.is_operator}
    job = next(r.job for r in demo.sim.cluster.running.values() if r.job.user in users)
    owner = job.user
    if not loop.state.ledger(owners=(owner,)):  # the policy noticed none of this user's jobs: the scheduler's
        loop.state.record(  # notice of one, as kube run --reclaim writes it to the shared ledger
            LedgerEntry(
                demo.now_s, job.id, owner, None, "notify", "every GPU idle for 12 min", "scheduler", 1, 0.2
            )
        )
    assert len(loop.state.ledger()) > len(loop.state.ledger(owners=(owner,)))  # others' entries exist
    page = _open(browser, base, demo.tokens.token_of(owner))
    assert page.locator("#tabs button[data-view=operator]").is_hidden()
    page.click("#tabs button[data-view=me]")
    page.wait_for_selector("#my-reclaim [data-testid=ledger-row]", timeout=20_000)
    shown = page.locator("#my-reclaim [data-testid=ledger-row]")
    mine = loop.state.ledger(owners=(owner,))
    assert shown.count() == len(mine) > 0
    assert shown.locator("button").count() == 0
    assert page.evaluate("api('/api/operator/ledger').then(() => 200, (e) => e.status)") == 403
    page.close()
