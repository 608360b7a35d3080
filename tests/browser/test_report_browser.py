"""The simulate report read in a real Chromium at 1,400 px: every table fits or scrolls, nothing is
cut off, wait reasons are there, and the timelines are small multiples (a panel per profile)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright
from typer.testing import CliRunner

from conftest import system_tool
from loadmaster.cli import app

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"
SIX = ("kube-default", "fifo", "sds", "nsml", "slurm", "fair")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    args = ["simulate", "--jobs", "150", "--profiles", ",".join(SIX), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out / "report.html"


@pytest.fixture(scope="module")
def page(report: Path) -> Iterator[Any]:
    executable = system_tool("chromium", CHROMIUM)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(report.as_uri())
        page.wait_for_selector(".js-plotly-plot")
        yield page
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-1400.png"), full_page=True)
        browser.close()


def test_the_page_never_scrolls_sideways_and_every_table_fits_or_scrolls(page: Any) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('table')].map(t => {
            const box = t.parentElement;
            return {cls: t.className, table: t.scrollWidth, box: box.clientWidth,
                    scrolls: getComputedStyle(box).overflowX === 'auto'};
        })"""
    )
    for b in boxes:
        assert b["table"] <= b["box"] or b["scrolls"], b
    breakdowns = [b for b in boxes if b["cls"] == "breakdown"]
    assert len(breakdowns) == 2
    for b in breakdowns:
        assert b["table"] <= b["box"], f"the by-size and by-group tables fit at 1,400 px: {b}"


def test_every_profile_is_visible_in_the_by_size_table(page: Any) -> None:
    shown = page.evaluate("""() => [...document.querySelectorAll('table.breakdown')][0].innerText""")
    for name in SIX:
        assert name in shown


def test_wait_reasons_per_profile_are_in_the_report(page: Any) -> None:
    assert page.locator("h2", has_text="Why jobs waited").count() == 1
    header = page.evaluate("() => document.querySelector('table.reasons tr').innerText")
    for name in SIX:
        assert name in header
    assert "held back last by" in page.locator("table.reasons").inner_text()


def test_allocation_is_labelled_over_arrivals_and_over_the_whole_run(page: Any) -> None:
    text = page.locator("table.metrics").inner_text()
    assert "GPU allocation, arrival window (%)" in text
    assert "GPU allocation, whole run with the drain (%)" in text


def test_timelines_are_small_multiples_with_a_panel_per_profile(page: Any) -> None:
    titles = page.evaluate(
        """() => [...document.querySelectorAll('.js-plotly-plot')].map(p =>
            [...p.querySelectorAll('.annotation-text')].map(a => a.textContent))"""
    )
    panelled = [t for t in titles if set(SIX) <= set(t)]
    assert len(panelled) == 2, titles  # allocation and queue length
