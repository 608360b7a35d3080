"""10,000 GPUs on one screen: the cluster view fits a 1920x1080 window in both layouts (issue 21).

Before, the cluster view of a 10,000-GPU demo was about 3,800 px tall and "my jobs first" about
27,000 px; the tiles now shrink and deep groups flow inline until the whole cluster fits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dashboard_browser import chromium, demo_server, open_page, shot
from loadmaster.serve import DemoOptions

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTH, HEIGHT = 1920, 1080


@pytest.fixture(scope="module")
def big() -> Iterator[tuple[str, Any]]:
    with demo_server(DemoOptions(gpus=10_000, days=1.0, history_s=1800.0)) as pair:  # reclaim window: 30 min
        yield pair


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.mark.parametrize("role", ["operator", "user"])
@pytest.mark.parametrize("layout", ["hierarchy", "user"])
def test_ten_thousand_gpus_fit_one_screen(big: tuple[str, Any], browser: Any, role: str, layout: str) -> None:
    base, demo = big
    name = (
        "operator"
        if role == "operator"
        else next(p.name for _, p in demo.tokens.principals() if not p.is_operator)
    )
    page = open_page(browser, base, demo.tokens.token_of(name), width=WIDTH, height=HEIGHT)
    page.evaluate(f"window.loadmaster.setLayout({layout!r})")
    page.wait_for_selector(f"#tiles[data-layout={layout}]")
    gpus = demo.sim.nodes.total_gpus
    assert gpus >= 9_900
    assert page.evaluate("window.loadmaster.tileCount()") == gpus
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= HEIGHT, f"the page is {height} px tall; the window is {HEIGHT}"
    tile = int(page.get_attribute("#tiles", "data-tile") or 0)
    assert tile >= 4, f"tiles of {tile} px are too small to read at a glance"
    # hovering a tile still names its node and owner, though deep groups lost their headers
    point = page.evaluate(f"window.loadmaster.nodeTile({demo.sim.nodes.nodes[-1].name!r})")
    page.mouse.move(point["x"], point["y"])
    assert demo.sim.nodes.nodes[-1].name in page.inner_text("#tooltip")
    shot(page, f"10k-{role}-{layout}")
    page.close()


def test_the_long_reclaim_table_pages_in_rank_order(big: tuple[str, Any], browser: Any) -> None:
    base, demo = big
    page = open_page(browser, base, demo.tokens.token_of("operator"), width=WIDTH, height=HEIGHT)
    page.click("#tabs button[data-view=operator]")
    page.wait_for_selector("[data-testid=reclaim-row]", timeout=120_000)
    page.wait_for_selector("[data-testid=history-chart]", timeout=60_000)
    table = page.locator("#dt-reclaim table")
    total = int(table.get_attribute("data-rows") or 0)
    assert total > 50, f"only {total} reclaim rows at 10,000 GPUs"  # more than two pages

    def wasted() -> list[float]:
        return [
            float(r.locator("td").nth(5).inner_text())
            for r in page.locator("[data-testid=reclaim-row]").all()
        ]

    first = wasted()
    assert len(first) == 25
    page.click("#dt-reclaim button[data-dt-page='1']")
    page.wait_for_selector("#dt-reclaim table[data-page='1']")
    second = wasted()
    assert len(second) == 25 and first + second == sorted(first + second, reverse=True)
    assert "26–50 of" in page.locator("#dt-reclaim .dt-info").inner_text()
    page.select_option("#dt-reclaim .dt-size", "500")
    page.wait_for_function(
        f"document.querySelectorAll('[data-testid=reclaim-row]').length === {min(total, 500)}"
    )
    shot(page, "10k-operator")
    page.close()
