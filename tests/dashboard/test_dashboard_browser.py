"""The dashboard in a real headless Chromium (Debian's chromium and chromedriver, driven by
selenium): every page loads against a store with jobs in every state with no console error
(CSP violations included), a preempted-and-restarted job's timeline is drawn, hostile names
stay text, and a non-loopback bind refuses the browser until it brings the token.

Skipped where no browser is installed, except in CI (``CI`` set), where a missing browser
fails the run: .ci/run installs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.control.store import Store
from provisioner.dashboard import DashboardServer
from tests.waiting import until
from tools import dashboard_sample, headless
from tools.dashboard_sample import HOSTILE_NAME, SAMPLE_STATES

TOKEN = "browser-token-0123456789abcdef"

_why = headless.missing()
if _why and os.environ.get("CI"):
    raise RuntimeError(f"the browser tests need a headless Chromium in CI: {_why}")
pytestmark = pytest.mark.skipif(bool(_why), reason=_why or "")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, str]]]:
    st = Store(f"sqlite:///{tmp_path_factory.mktemp('browser') / 'sample.db'}")
    ids = dashboard_sample.build(st)
    yield st, ids
    st.close()


@pytest.fixture(scope="module")
def server(store: tuple[Store, dict[str, str]]) -> Iterator[DashboardServer]:
    srv = DashboardServer(store[0], port=0)
    srv.start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless.chromium(1400, 1000)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def load(driver: Any, url: str) -> None:
    headless.console_errors(driver)  # drain what came before
    driver.get(url)
    # the page's script marks the document ready once it ran
    ready = "return document.documentElement.dataset.ready"
    assert until(lambda: driver.execute_script(ready) == "1", 5), f"{url}: its script never ran"


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def test_jobs_page_loads_with_every_state_and_no_console_error(
    browser: Any, server: DashboardServer
) -> None:
    load(browser, server.url)
    assert browser.title == "Jobs · provisioner"
    rows = css(browser, "table.jobs tbody tr")
    assert len(rows) == len(SAMPLE_STATES) + 4  # + the fleet's GCP/Azure jobs
    states = {r.get_attribute("data-state") for r in rows}
    assert states == set(SAMPLE_STATES.values())
    for state in states:
        card = css(browser, f'.cards a[data-state="{state}"] .n')
        assert card and int(card[0].text) >= 1, state
    # the stylesheet applied (served under the CSP), the SVG meters drawn
    header = css(browser, "header.top")[0]
    assert header.value_of_css_property("position") == "sticky"
    assert css(browser, "svg.meter .fill")
    # the relative times came from the script
    assert any("ago" in t.text for t in css(browser, "time"))
    assert headless.console_errors(browser) == []
    # filter through the form, as a person would
    from selenium.webdriver.support.ui import Select

    Select(css(browser, "form.filter select")[0]).select_by_value("recovering")
    css(browser, "form.filter button")[0].click()
    until(lambda: "state=recovering" in browser.current_url, 5)
    assert [r.get_attribute("data-state") for r in css(browser, "table.jobs tbody tr")] == [
        "recovering"
    ]
    assert headless.console_errors(browser) == []


def test_preempted_and_restarted_job_timeline(
    browser: Any, server: DashboardServer, store: tuple[Store, dict[str, str]]
) -> None:
    _, ids = store
    load(browser, server.url)
    link = next(a for a in css(browser, "a.job-name") if a.text == "llama-7b-lora")
    link.click()
    until(lambda: "/jobs/" in browser.current_url, 5)
    assert browser.current_url.endswith("/jobs/" + ids["llama-7b-lora"])
    svg = css(browser, "svg.timeline")[0]
    assert svg.size["width"] > 800  # drawn at the page's width
    lanes = css(browser, "svg.timeline g.lane")
    assert [g.get_attribute("data-attempt") for g in lanes] == ["1", "2"]
    assert "lane-preempted" in (lanes[0].get_attribute("class") or "")
    kinds = [g.get_attribute("data-kind") for g in css(browser, "svg.timeline g.mark")]
    for kind in ("launch", "notice", "checkpoint", "preemption", "restart"):
        assert kind in kinds, kind
    # the reasons, as tooltips on the marks and in the table below
    pre = css(browser, "svg.timeline g.mark-preemption title")[0]
    assert "Server.SpotInstanceTermination" in pre.get_attribute("textContent")
    rows = [r.get_attribute("data-kind") for r in css(browser, "table.marks tr.mark-row")]
    assert rows.index("notice") < rows.index("preemption") < rows.index("restart")
    restart_row = css(browser, "table.marks tr.mark-restart")[0].text
    assert "restart from checkpoint step-00000398" in restart_row
    # the preemption mark sits where attempt 1's bar ends, the restart where attempt 2 begins
    bar1 = css(browser, 'svg.timeline g.lane[data-attempt="1"] rect')[0].rect
    bar2 = css(browser, 'svg.timeline g.lane[data-attempt="2"] rect')[0].rect
    mark = css(browser, "svg.timeline g.mark-preemption")[0].rect
    assert abs((bar1["x"] + bar1["width"]) - (mark["x"] + mark["width"] / 2)) < 8
    assert bar2["x"] >= bar1["x"] + bar1["width"] - 2
    # spend chart and the stored plan with its rejected offers
    assert css(browser, "#spend svg polyline")
    assert css(browser, "details.plan-stored[open] table.rejected tr[data-reason]")
    assert css(browser, "details.plan-stored[open] tr.chosen")
    assert headless.console_errors(browser) == []


def test_hostile_name_is_text_and_runs_nothing(
    browser: Any, server: DashboardServer, store: tuple[Store, dict[str, str]]
) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    _, ids = store
    for url in (server.url, server.url + "fleet", server.url + "jobs/" + ids[HOSTILE_NAME]):
        load(browser, url)
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - raises when no alert is open
        scripts = browser.execute_script(
            "return Array.from(document.scripts).map(s => s.getAttribute('src'))"
        )
        assert scripts == ["/static/dashboard.js"]
        assert (
            browser.execute_script("return document.querySelectorAll('img[src=x], iframe').length")
            == 0
        )
        assert HOSTILE_NAME in browser.find_element("tag name", "body").text
        assert headless.console_errors(browser) == []
    assert browser.find_element("css selector", "h1 .job-name").text == HOSTILE_NAME


def test_fleet_and_prices_pages(browser: Any, server: DashboardServer) -> None:
    load(browser, server.url + "fleet")
    clouds = [c.get_attribute("data-provider") for c in css(browser, ".cloud")]
    assert set(clouds) == {"aws", "gcp", "azure"}
    assert css(browser, ".cloud svg.bars rect.bar")
    assert headless.console_errors(browser) == []
    load(browser, server.url + "prices")
    assert len(css(browser, "#history svg g.series")) >= 3
    css(browser, "nav.chips a")[1].click()
    until(lambda: "provider=" in browser.current_url, 5)
    assert css(browser, "#quotes tbody tr")
    # the live toggle: remembered in localStorage, no error
    css(browser, "#live")[0].click()
    assert browser.execute_script("return localStorage.getItem('provisioner.live')") == "1"
    css(browser, "#live")[0].click()
    assert headless.console_errors(browser) == []


def test_non_loopback_bind_refuses_the_browser_without_the_token(
    browser: Any, store: tuple[Store, dict[str, str]]
) -> None:
    srv = DashboardServer(store[0], address="0.0.0.0", port=0, token=TOKEN)
    srv.start()
    base = f"http://127.0.0.1:{srv.port}/"
    try:
        headless.console_errors(browser)
        browser.delete_all_cookies()
        browser.get(base)
        body = browser.find_element("tag name", "body").text
        assert "401" in body and "needs its token" in body
        assert "llama-7b-lora" not in body
        assert any("401" in e for e in headless.console_errors(browser))  # the refusal itself
        browser.get(base + "fleet")
        assert "needs its token" in browser.find_element("tag name", "body").text
        headless.console_errors(browser)
        # once with ?token=, then the cookie (HttpOnly: the page's script cannot read it)
        load(browser, base + f"?token={TOKEN}")
        assert browser.current_url == base  # the token left the address bar
        assert "llama-7b-lora" in browser.find_element("tag name", "body").text
        assert browser.execute_script("return document.cookie") == ""
        cookie = browser.get_cookie("provisioner_dashboard")
        assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        load(browser, base + "fleet")
        assert css(browser, ".cloud")
        assert headless.console_errors(browser) == []
    finally:
        browser.delete_all_cookies()
        srv.close()


@pytest.mark.e2e
def test_a_real_job_preempted_and_restarted_on_the_sim(browser: Any, tmp_path: Path) -> None:
    """Not sample rows: a job run by the reconciler on the sim cloud, its first spot instance
    taken back with a notice; the agent checkpoints, the job restarts from that checkpoint
    elsewhere and finishes. Its page shows the story from what the reconciler recorded."""
    from providers.sim import SimProvider
    from provisioner.api import Job, submit
    from tests.e2e_util import write_policy

    sim_dir = tmp_path / "sim"
    policy = write_policy(tmp_path / "p.yaml", steps=400, ckpt=tmp_path / "ck")
    options = {
        "state_dir": str(sim_dir),
        "mimic": "aws",
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": 6,
        "demo_outage_s": 8,
        "idle_exit_s": 120,
    }
    st = Store(f"sqlite:///{tmp_path / 's.db'}")
    srv = None
    try:
        _, job_id = submit(
            policy, provider="sim", provider_defaults=False, provider_options=options, store=st
        )
        job = Job(st, job_id)
        assert job.wait(timeout=150, poll_s=0.5) == "succeeded", job.refresh().reason
        srv = DashboardServer(st, port=0)
        srv.start()
        load(browser, srv.url + f"jobs/{job_id}")
        kinds = [g.get_attribute("data-kind") for g in css(browser, "svg.timeline g.mark")]
        for kind in ("launch", "notice", "checkpoint", "preemption", "restart", "succeeded"):
            assert kind in kinds, (kind, kinds)
        lanes = [g.get_attribute("class") for g in css(browser, "svg.timeline g.lane")]
        assert "lane-preempted" in (lanes[0] or "") and len(lanes) >= 2
        rows = [r.get_attribute("data-kind") for r in css(browser, "table.marks tr.mark-row")]
        # the notice first; the replacement launched during it (overlap on notice, the sim's
        # notice is long enough for a boot), so its restart may come before the preemption
        assert rows.index("notice") < min(rows.index("preemption"), rows.index("restart"))
        assert rows.index("restart") < rows.index("succeeded")
        # every launch stored the plan it was chosen from
        plans = css(browser, "details.plan")
        assert plans and all(p.get_attribute("data-source") == "stored" for p in plans)
        assert css(browser, "details.plan[open] table.rejected tr[data-reason]")
        assert headless.console_errors(browser) == []
    finally:
        if srv is not None:
            srv.close()
        st.close()
        SimProvider(sim_dir).shutdown_server(terminate_all=True)
