"""The operator's charts and long tables, the job page's axes and scales, groups and the idle count,
in real Chromium (issue 21, item 7). The demo is the one ``serve --demo`` runs (its load included)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard_browser import chromium, demo_server, open_page, shot
from loadmaster.serve import DemoOptions, views
from loadmaster.serve.demo import DEMO_LOAD

pytestmark = pytest.mark.browser

CLOCK = re.compile(r"^(Mon |Tue |Wed |Thu |Fri |Sat |Sun )?\d\d:\d\d$")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Any]]:
    with demo_server(DemoOptions(history_s=1800.0, load=DEMO_LOAD)) as pair:
        yield pair


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _operator_page(server: tuple[str, Any], browser: Any) -> Any:
    base, demo = server
    page = open_page(browser, base, demo.tokens.token_of("operator"))
    page.click("#tabs button[data-view=operator]")
    page.wait_for_selector("[data-testid=reclaim-row]", timeout=30_000)
    page.wait_for_selector("[data-testid=history-chart]", timeout=30_000)
    page.wait_for_selector("[data-testid=group-row]", timeout=30_000)
    return page


def test_history_charts_per_pool_with_a_time_range_picker(server: tuple[str, Any], browser: Any) -> None:
    _, demo = server
    page = _operator_page(server, browser)
    charts = page.locator("[data-testid=history-chart]")
    assert charts.count() == 3  # allocation, utilisation, queue length
    pools = len(demo.sim.nodes.pools)
    for chart in charts.all():
        assert chart.get_attribute("data-series") == str(pools)
        assert chart.locator("path[d^=M]").count() == pools  # every pool drew a line
        ticks = [t.text_content() or "" for t in chart.locator("text[data-axis=x]").all()]
        assert len(ticks) >= 2 and len(set(ticks)) == len(ticks)
        assert all(CLOCK.match(t) for t in ticks), ticks
        assert chart.locator("text[data-axis=y]").count() >= 2  # a scale
    every = int(charts.first.get_attribute("data-points") or 0)
    shot(page, "operator-history")
    page.select_option("#history-range", "900")
    page.wait_for_selector("#history-range[data-window='900']")
    fewer = int(page.locator("[data-testid=history-chart]").first.get_attribute("data-points") or 0)
    assert 0 < fewer < every
    page.close()


def test_reclaim_table_sorts_and_filters_and_one_idle_count(server: tuple[str, Any], browser: Any) -> None:
    _, demo = server
    page = _operator_page(server, browser)
    table = page.locator("#dt-reclaim table")
    assert (
        table.get_attribute("data-sort") == "wasted_gpu_hours" and table.get_attribute("data-desc") == "true"
    )
    headers = [h.inner_text() for h in table.locator("th").all()]
    assert any(h.startswith("idle for") for h in headers)

    def column(n: int) -> list[str]:
        return [r.locator("td").nth(n).inner_text() for r in page.locator("[data-testid=reclaim-row]").all()]

    wasted = [float(v) for v in column(5)]
    assert wasted == sorted(wasted, reverse=True)
    page.click("#dt-reclaim th[data-dt-sort=gpus]")
    page.wait_for_selector("#dt-reclaim table[data-sort=gpus][data-desc=true]")
    gpus = [float(v) for v in column(2)]
    assert gpus == sorted(gpus, reverse=True)
    page.click("#dt-reclaim th[data-dt-sort=gpus]")
    page.wait_for_selector("#dt-reclaim table[data-sort=gpus][data-desc=false]")
    assert [float(v) for v in column(2)] == sorted(gpus)
    user = column(1)[0]
    page.fill("#dt-reclaim .dt-filter", user)
    page.wait_for_function(
        "u => [...document.querySelectorAll('[data-testid=reclaim-row]')]"
        ".every(r => r.cells[1].innerText === u)",
        arg=user,
    )
    theirs = [j for j in views.reclaim_view(demo)["jobs"] if user in (j["user"], j["job"], j["action"])]
    assert page.locator("#dt-reclaim table").get_attribute("data-rows") == str(len(theirs))
    page.fill("#dt-reclaim .dt-filter", "")

    card = page.locator("[data-testid=idle-card]")
    page.wait_for_selector("[data-testid=idle-card][data-listed]")
    idle, listed = int(card.get_attribute("data-idle") or -1), int(card.get_attribute("data-listed") or -1)
    assert idle == int(page.locator(".card.state-allocated-idle b").inner_text())
    heading = page.locator("#reclaim h3").inner_text()
    in_table = int(re.search(r"Reclaim: (\d+) GPUs idle", heading).group(1))  # type: ignore[union-attr]
    assert listed <= in_table and listed <= idle
    explain = page.locator("#idle-explain").inner_text()
    assert f"{listed} idle" in explain and f"{idle - listed} idle for less" in explain
    page.close()


def test_groups_and_unhealthy_gpus_for_operators(server: tuple[str, Any], browser: Any) -> None:
    _, demo = server
    page = _operator_page(server, browser)
    groups = {r.job.group for r in demo.sim.cluster.running.values()}
    groups |= {p.job.group for p in demo.sim.cluster.pending.values()}
    assert page.locator("[data-testid=group-row]").count() == len(groups)
    assert "no quota plugin" in page.locator("#groups").inner_text()
    assert "docs.nvidia.com/deploy/xid-errors" in page.locator("#view-operator").inner_text()
    rows = page.locator("[data-testid=unhealthy]").all()
    assert rows and all(r.locator("td").nth(3).inner_text() for r in rows)
    shot(page, "operator-groups")
    page.close()


def test_job_page_axis_reads_times_and_sparklines_have_scales(server: tuple[str, Any], browser: Any) -> None:
    base, demo = server
    page = open_page(browser, base, demo.tokens.token_of("operator"))
    job = max(demo.sim.cluster.running.values(), key=lambda r: (r.job.gpus, r.job.id)).job
    page.evaluate(f"window.loadmaster.openJob({job.id!r})")
    page.wait_for_selector("[data-testid=sparkline]", timeout=30_000)
    page.wait_for_selector("#job-heatmap .xtick text", timeout=30_000)
    ticks = [t.text_content() or "" for t in page.locator("#job-heatmap .xtick text").all()]
    assert len(set(ticks)) == len(ticks) >= 2, ticks  # before: every tick read "Tue day"
    assert all(CLOCK.match(t) for t in ticks), ticks
    spark = page.locator("[data-testid=sparkline]").first
    assert spark.locator("text[data-scale=high]").text_content() == "100"
    assert spark.locator("text[data-scale=low]").text_content() == "0"
    assert (spark.locator("text[data-scale=last]").text_content() or "").endswith("%")
    shot(page, "job-axis")
    page.close()


def test_queue_has_reasons_from_the_start(server: tuple[str, Any], browser: Any) -> None:
    base, demo = server
    page = open_page(browser, base, demo.tokens.token_of("operator"))
    page.click("#tabs button[data-view=queue]")
    page.wait_for_selector("[data-testid=queue-job]")
    rows = page.locator("[data-testid=queue-job]").all()
    assert len(rows) == min(25, len(demo.sim.cluster.pending)) > 0
    assert all(r.locator("td").nth(6).inner_text().strip() for r in rows)  # why it waits
    page.close()


def test_a_nodes_panel_says_what_is_wrong_with_an_unhealthy_gpu(
    server: tuple[str, Any], browser: Any
) -> None:
    base, demo = server
    bad = views.operator_summary(demo)["unhealthy"]
    assert bad, "the demo injects XID and ECC faults; none is unhealthy now"
    node, gpu, meaning = bad[0]["node"], bad[0]["gpu"], bad[0]["meaning"]
    page = open_page(browser, base, demo.tokens.token_of("operator"))
    point = page.evaluate(f"window.loadmaster.nodeTile({node!r})")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector(f"#node-panel[data-node='{node}']")
    problem = page.locator(f"#node-panel [data-testid=node-gpu][data-gpu='{gpu}'] [data-testid=gpu-problem]")
    assert problem.inner_text() == meaning  # "XID 79: GPU has fallen off the bus..." or the ECC errors
    assert "xid" not in meaning.split()  # words, not a badge bit
    page.close()
