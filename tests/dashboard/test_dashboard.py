"""The dashboard over real HTTP: pages and their JSON twins against a store with jobs in every
state, escaping of hostile names, credentials never rendered, the access rules (loopback,
bearer token, read-only), pagination, the plans, and the daemon serving it (a real
``provisioner daemon`` subprocess) with ``provisioner up`` printing its address."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from provisioner.control.store import Store, heartbeat
from provisioner.dashboard import DashboardError, DashboardServer
from provisioner.dashboard.history import dashboard_url, record_address
from tests.dashboard_store import sample_store
from tests.waiting import until
from tools import dashboard_sample
from tools.dashboard_sample import HOSTILE_NAME, HOSTILE_REASON, SAMPLE_STATES

REPO = Path(__file__).resolve().parents[2]
TOKEN = "t0k3n-for-tests-0123456789abcdef"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, str]]]:
    db = tmp_path_factory.mktemp("dash") / "sample.db"
    ids = sample_store(tmp_path_factory, db)
    store = Store(f"sqlite:///{db}")
    yield store, ids
    store.close()


@pytest.fixture(scope="module")
def served(
    sample: tuple[Store, dict[str, str]],
) -> Iterator[tuple[DashboardServer, dict[str, str]]]:
    store, ids = sample
    server = DashboardServer(store, port=0)
    server.start()
    yield server, ids
    server.close()


def get(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", data: bytes | None = None
) -> tuple[int, Message, str]:
    """(status, headers: names case-insensitive, as HTTP's are; body) of one request."""
    req = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    opener = urllib.request.build_opener(_NoRedirect())
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode("utf-8")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def get_json(url: str, headers: dict[str, str] | None = None) -> Any:
    status, _, body = get(url, {"Accept": "application/json", **(headers or {})})
    assert status == 200, body
    return json.loads(body)


# -- pages --------------------------------------------------------------------------------------


def test_jobs_page_lists_every_state_with_placement_market_progress_spend_deadline(
    served: tuple[DashboardServer, dict[str, str]],
) -> None:
    server, ids = served
    status, headers, html = get(server.url)
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    for state in set(SAMPLE_STATES.values()):
        assert f'data-state="{state}"' in html, state
    doc = get_json(server.url)
    by_name = {j["name"]: j for j in doc["jobs"]}
    assert {j["state"] for j in doc["jobs"]} >= set(SAMPLE_STATES.values())
    assert doc["counts"]["total"] == len(ids)
    llama = by_name["llama-7b-lora"]
    assert llama["placement"]["market"] == "spot" and llama["placement"]["attempt"] == 2
    assert llama["progress"]["step"] == 640 and llama["progress"]["total_steps"] == 1200
    assert llama["budget_usd"] == 60 and 0 < llama["spent_usd"] < 60
    assert llama["deadline_left_s"] > 0 and llama["restarts"] == 1
    assert by_name["bert-eval"]["placement"] is None
    # the same through ?format=json
    status, headers, body = get(server.url + "?format=json&state=failed")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert [j["name"] for j in json.loads(body)["jobs"]] == ["whisper-batch"]


def test_job_page_shows_the_preempted_and_restarted_timeline_with_reasons(
    served: tuple[DashboardServer, dict[str, str]],
) -> None:
    server, ids = served
    doc = get_json(server.url + "jobs/" + ids["llama-7b-lora"])
    marks = doc["timeline"]["marks"]
    kinds = [m["kind"] for m in marks]
    order = [kinds.index(k) for k in ("launch", "notice", "preemption", "restart")]
    assert order == sorted(order), kinds
    assert kinds.count("checkpoint") == 4
    pre = next(m for m in marks if m["kind"] == "preemption")
    assert "Server.SpotInstanceTermination" in pre["reason"] and pre["attempt"] == 1
    restart = next(m for m in marks if m["kind"] == "restart")
    assert "restart from checkpoint step-00000398" in restart["reason"]
    notice = next(m for m in marks if m["kind"] == "notice")
    assert notice["attempt"] == 1  # matched by its instance
    assert [lane["state"] for lane in doc["timeline"]["lanes"]] == ["preempted", "running"]
    # spend over time rises to what the attempts cost, never down
    usd = [p[1] for p in doc["spend"]["points"]]
    assert usd == sorted(usd) and usd[-1] == pytest.approx(
        sum(a["cost_usd"] for a in doc["attempts"]), rel=1e-6
    )
    status, _, html = get(server.url + "jobs/" + ids["llama-7b-lora"])
    assert status == 200
    assert html.count('class="mark mark-preemption"') == 1
    assert html.count('class="mark mark-restart"') == 1
    assert "Server.SpotInstanceTermination" in html


def test_plans_are_the_stored_ones_else_replanned_and_said_so(
    served: tuple[DashboardServer, dict[str, str]],
) -> None:
    server, ids = served
    plans = get_json(server.url + "jobs/" + ids["llama-7b-lora"])["plans"]
    assert [(p["attempt"], p["source"]) for p in plans] == [(2, "stored"), (1, "stored")]
    second = plans[0]["plan"]
    assert second["chosen_rank"] == 1 and second["rejected"]
    assert "cooldown" in second["rejected"]  # attempt 2 was planned with the preempted zone cooled
    assert sum(second["rejected"].values()) + second["eligible"] <= second["candidates"] * 2
    pending = get_json(server.url + "jobs/" + ids["bert-eval"])["plans"]
    assert [p["source"] for p in pending] == ["re-planned"]
    assert "planned again" in pending[0]["note"] and pending[0]["plan"]["top"]
    _, _, html = get(server.url + "jobs/" + ids["bert-eval"])
    assert "re-planned" in html and "planned again on this page" in html
    # deterministic: the same page twice gives the same plan
    again = get_json(server.url + "jobs/" + ids["bert-eval"])["plans"]
    assert again[0]["plan"] == pending[0]["plan"]


def test_fleet_and_prices(served: tuple[DashboardServer, dict[str, str]]) -> None:
    server, _ = served
    fleet = get_json(server.url + "fleet")
    clouds = {c["provider"]: c for c in fleet["clouds"]}
    assert set(clouds) == {"aws", "gcp", "azure"}
    assert fleet["alive"] == sum(c["instances"] for c in clouds.values()) == len(fleet["instances"])
    assert all(r["instances"] >= 1 for c in clouds.values() for r in c["regions"])
    prices = get_json(server.url + "prices")
    assert prices["paging"]["total"] > 100 and len(prices["quotes"]) == 100
    assert len(prices["refreshes"]) == 50  # newest 50 of 72 (24 refreshes x 3 clouds)
    series = prices["history"]
    assert any(len(v.get("spot", [])) == 24 for v in series.values())
    only = get_json(server.url + "prices?provider=gcp")
    assert {q["provider"] for q in only["quotes"]} == {"gcp"}
    for path in ("fleet", "prices", "prices?provider=aws&page=2"):
        status, _, html = get(server.url + path)
        assert status == 200 and "<svg" in html


def test_fleet_leaves_out_instances_of_finished_jobs(
    served: tuple[DashboardServer, dict[str, str]], sample: tuple[Store, dict[str, str]]
) -> None:
    """A finished job's instance row keeps the state last seen (nobody follows it any more):
    the fleet counts it apart, not as live capacity."""
    from provisioner.control.store import InstanceRow

    server, ids = served
    store, _ = sample
    before = get_json(server.url + "fleet")
    row = next(i for i in store.instances(ids["mistral-sft"]))
    try:
        store.upsert_instance(_copy(row, state="running"))
        after = get_json(server.url + "fleet")
        assert after["alive"] == before["alive"] and after["stale"] == before["stale"] + 1
        assert row.instance_id not in {i["instance_id"] for i in after["instances"]}
        orphan = _copy(row, instance_id="i-orphan", job_id=None, state="running")
        store.upsert_instance(orphan)  # no job: live until reaping says otherwise
        assert get_json(server.url + "fleet")["alive"] == before["alive"] + 1
    finally:
        store.upsert_instance(_copy(row, state="terminated"))
        store.upsert_instance(_copy(row, instance_id="i-orphan", job_id=None, state="terminated"))
    assert isinstance(row, InstanceRow)


def _copy(row: Any, **changes: Any) -> Any:
    from provisioner.control.store import InstanceRow

    cols = {c.name: getattr(row, c.name) for c in InstanceRow.__table__.columns}
    return InstanceRow(**{**cols, **changes})


def test_hostile_names_and_reasons_are_text(served: tuple[DashboardServer, dict[str, str]]) -> None:
    server, ids = served
    jid = ids[HOSTILE_NAME]
    for path in ("", f"jobs/{jid}", "fleet"):
        status, _, html = get(server.url + path)
        assert status == 200
        assert HOSTILE_NAME not in html and "<script>alert" not in html
        assert "<img src=x" not in html and "<iframe" not in html
        assert "&lt;script&gt;alert(" in html
        assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/static/dashboard.js" defer>']
    _, _, html = get(server.url + f"jobs/{jid}")
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;iframe" in html
    doc = get_json(server.url + f"jobs/{jid}")
    assert doc["job"]["name"] == HOSTILE_NAME and doc["job"]["reason"] == HOSTILE_REASON


def test_credentials_are_never_rendered(
    served: tuple[DashboardServer, dict[str, str]], sample: tuple[Store, dict[str, str]]
) -> None:
    from providers.base import register_secret

    server, ids = served
    store, _ = sample
    secret = "AKIAEXAMPLESECRET12345"
    register_secret(secret)
    store.update_job(
        ids["whisper-batch"], at=datetime.now(UTC), reason=f"auth failed with key {secret}"
    )
    pages = ["", "fleet", "prices", *[f"jobs/{j}" for j in ids.values()]]
    for path in pages:
        for fmt in ("", "?format=json"):
            status, _, body = get(server.url + path + fmt)
            assert status == 200, path
            for never in ("NEVER-RENDER-ME", "sk-live-do-not-render", secret, "secret_access_key"):
                assert never not in body, (path, fmt, never)
    # the store URL shown in the footer has no password
    from provisioner.dashboard.render import Renderer

    r = Renderer(store_url="postgresql+psycopg://prov:hunter2secret@db.example:5432/prov")
    html = r.env.get_template("base.html").render(path="/", json_link="")
    assert "hunter2secret" not in html and "prov:***@db.example" in html


def test_bad_input_is_a_clear_400_or_404(served: tuple[DashboardServer, dict[str, str]]) -> None:
    server, _ = served
    status, _, html = get(server.url + "?page=abc")
    assert status == 400 and "page=&#39;abc&#39;: expected a whole number" in html
    status, _, body = get(server.url + "?state=bogus&format=json")
    assert status == 400 and "expected one of pending" in json.loads(body)["error"]
    status, _, html = get(server.url + "jobs/<nope>")
    assert status == 404 and "&lt;nope&gt;" in html and "<nope>" not in html
    status, _, _ = get(server.url + "static/../server.py")
    assert status == 404


# -- access -------------------------------------------------------------------------------------


def test_beyond_loopback_needs_a_token_to_start(sample: tuple[Store, dict[str, str]]) -> None:
    store, _ = sample
    with pytest.raises(DashboardError, match="beyond loopback, without a token"):
        DashboardServer(store, address="0.0.0.0", port=0)
    with pytest.raises(DashboardError, match="at least 16"):
        DashboardServer(store, address="0.0.0.0", port=0, token="short")


def test_non_loopback_bind_refuses_without_the_token(sample: tuple[Store, dict[str, str]]) -> None:
    store, ids = sample
    server = DashboardServer(store, address="0.0.0.0", port=0, token=TOKEN)
    server.start()
    base = f"http://127.0.0.1:{server.port}/"
    try:
        for path in ("", "fleet", "prices", f"jobs/{ids['llama-7b-lora']}", "static/dashboard.css"):
            status, headers, body = get(base + path)
            assert status == 401, path
            assert headers["WWW-Authenticate"].startswith("Bearer")
            assert "llama-7b-lora" not in body and "sample.db" not in body
        assert get(base, {"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
        assert get(base, {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        assert get_json(base + "fleet", {"Authorization": f"Bearer {TOKEN}"})["alive"] >= 1
        # a browser: ?token= once, then an HttpOnly cookie and the token gone from the address
        status, headers, _ = get(base + f"prices?provider=gcp&token={TOKEN}")
        assert status == 303 and headers["Location"] == "/prices?provider=gcp"
        cookie = headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert get(base, {"Cookie": cookie.split(";")[0]})[0] == 200
        # nothing changes state: without the token 401, with it 405
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert get(base + "jobs/x", method=method, data=b"{}")[0] == 401
            status, headers, _ = get(
                base + "jobs/x", {"Authorization": f"Bearer {TOKEN}"}, method=method, data=b"{}"
            )
            assert status == 405 and headers["Allow"] == "GET, HEAD"
        assert get(base + "healthz")[0] == 200  # says "ok", nothing else
    finally:
        server.close()


def test_loopback_without_token_refuses_other_hosts_and_writes(
    served: tuple[DashboardServer, dict[str, str]],
) -> None:
    server, _ = served
    assert get(server.url, {"Host": f"localhost:{server.port}"})[0] == 200
    status, _, html = get(server.url, {"Host": "attacker.example"})  # DNS rebinding
    assert status == 403 and "llama" not in html
    assert get(server.url, method="POST", data=b"x")[0] == 405


# -- pagination ---------------------------------------------------------------------------------


def test_pagination_and_filters(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'many.db'}")
    dashboard_sample.bulk(store, 250)
    server = DashboardServer(store, port=0, page_size=100)
    server.start()
    try:
        pages = [get_json(server.url + f"?page={n}") for n in (1, 2, 3)]
        assert [len(p["jobs"]) for p in pages] == [100, 100, 50]
        assert pages[2]["paging"] == {"page": 3, "per_page": 100, "total": 250, "pages": 3}
        seen = [j["id"] for p in pages for j in p["jobs"]]
        assert len(set(seen)) == 250
        stamps = [j["submitted_at"] for p in pages for j in p["jobs"]]
        assert stamps == sorted(stamps, reverse=True)
        assert get_json(server.url + "?page=99")["paging"]["page"] == 3  # clamped
        running = get_json(server.url + "?state=running&per_page=1000")
        assert running["paging"]["total"] == running["counts"]["by_state"]["running"]
        assert {j["state"] for j in running["jobs"]} == {"running"}
        found = get_json(server.url + "?q=sweep-0012")
        assert {j["name"] for j in found["jobs"]} == {f"sweep-0012{k}" for k in range(10)}
        _, _, html = get(server.url + "?page=2&state=running")
        assert 'href="/?page=3&amp;state=running"' in html or "page=1" in html
        assert "page 2 of" in html
    finally:
        server.close()
        store.close()


# -- the daemon serves it; `up` prints it ---------------------------------------------------------


def test_daemon_serves_the_dashboard_and_up_prints_its_address(tmp_path: Path) -> None:
    url_db = f"sqlite:///{tmp_path / 'd.db'}"
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        json.dumps(
            {
                "store": url_db,
                # one pass at start, the next in an hour: the job `up` hands over stays
                # pending (this test is about the page, not the sim cloud)
                "reconcile_interval": "1h",
                "metrics": {"enabled": False},
                "dashboard": {"port": 0},
            }
        )
    )
    log = tmp_path / "daemon.log"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("NOTIFY_SOCKET", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "provisioner", "daemon", "--config", str(cfg)],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def address() -> str | None:
            m = re.search(r"dashboard on (http://\S+/)", log.read_text())
            return m.group(1) if m else None

        assert until(lambda: address() is not None, 60), log.read_text()
        page = address()
        assert page, log.read_text()
        assert page.startswith("http://127.0.0.1:")
        status, _, html = get(page)
        assert status == 200 and "No jobs" in html
        store = Store(url_db)
        assert dashboard_url(store, datetime.now(UTC)) == page
        policy = REPO / "policies" / "spot-finetune.yaml"
        done = subprocess.run(
            [sys.executable, "-m", "provisioner", "up", "--policy", str(policy), "--detach",
             "--json", "--store", url_db],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["supervised_by"] == "daemon"
        assert doc["dashboard"] == f"{page}jobs/{doc['id']}"
        status, _, html = get(doc["dashboard"])
        assert status == 200 and doc["id"] in html
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        # replica gone: no address
        assert until(lambda: dashboard_url(store, datetime.now(UTC)) is None, 10)
        store.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_up_prints_no_address_without_a_live_daemon(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    now = datetime.now(UTC)
    heartbeat(store, "gone:1", now - timedelta(minutes=5))
    record_address(store, "gone:1", "http://127.0.0.1:8470/", now - timedelta(minutes=5))
    assert dashboard_url(store, now) is None
    heartbeat(store, "alive:2", now)
    assert dashboard_url(store, now) is None  # alive, but serves no page
    record_address(store, "alive:2", "http://127.0.0.1:9999/", now)
    assert dashboard_url(store, now) == "http://127.0.0.1:9999/"
    store.close()


def test_dashboard_command_serves_a_store_and_refuses_bad_setups(tmp_path: Path) -> None:
    url_db = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url_db)
    dashboard_sample.build(store)
    store.close()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PROVISIONER_DASHBOARD_TOKEN", None)
    bad = subprocess.run(
        [sys.executable, "-m", "provisioner", "dashboard", "--store", url_db,
         "--address", "0.0.0.0", "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "without a token" in bad.stderr
    assert "Traceback" not in bad.stderr
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", "dashboard", "--store", url_db, "--address",
         "0.0.0.0", "--port", "0", "--token-file", str(token_file), "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        doc = json.loads(line)
        port = int(doc["url"].rsplit(":", 1)[1].strip("/"))
        base = f"http://127.0.0.1:{port}/"
        assert get(base)[0] == 401
        jobs = get_json(base, {"Authorization": f"Bearer {TOKEN}"})
        assert jobs["counts"]["total"] == len(SAMPLE_STATES) + 4
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        assert TOKEN not in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.postgres
def test_pages_on_postgresql() -> None:
    from tests.pg import fresh_database

    with fresh_database() as url:
        store = Store(url)
        try:
            ids = dashboard_sample.build(store)
            dashboard_sample.bulk(store, 120)
            server = DashboardServer(store, port=0)
            server.start()
            try:
                doc = get_json(server.url + "?per_page=50&page=3")
                assert (
                    doc["paging"]["total"] == len(ids) + 120
                    and len(doc["jobs"]) == len(ids) + 120 - 100
                )
                job = get_json(server.url + "jobs/" + ids["llama-7b-lora"])
                assert [m["kind"] for m in job["timeline"]["marks"]].count("preemption") == 1
                assert {c["provider"] for c in get_json(server.url + "fleet")["clouds"]} == {
                    "aws",
                    "gcp",
                    "azure",
                }
                assert get_json(server.url + "prices")["history"]
                for path in ("", "fleet", "prices", f"jobs/{ids[HOSTILE_NAME]}"):
                    status, _, html = get(server.url + path)
                    assert status == 200 and "<script>alert" not in html
            finally:
                server.close()
        finally:
            store.close()


def test_timeline_of_a_job_restarted_many_times_keeps_the_newest_attempts() -> None:
    from provisioner.dashboard.timeline import MAX_LANES, timeline

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    atts = []
    for n in range(1, MAX_LANES + 11):
        start = t0 + timedelta(minutes=10 * n)
        atts.append(
            {
                "attempt": n, "provider": "aws", "zone": "eu-west-1a", "instance_type": "g5",
                "market": "spot", "price_per_hour": 1.0, "state": "preempted",
                "launched_at": start, "created_at": start,
                "ended_at": start + timedelta(minutes=9), "reason": "r", "end_reason": "e",
                "cost_usd": 0.15, "instance_id": f"i-{n}",
            }
        )  # fmt: skip
    job = {"submitted_at": t0, "progress": {}}
    tl = timeline(job, atts, [], t0 + timedelta(days=1))
    assert tl["hidden_attempts"] == 10 and len(tl["lanes"]) == MAX_LANES
    assert tl["lanes"][0]["attempt"] == 11
    assert {m["attempt"] for m in tl["marks"]} == set(range(11, MAX_LANES + 11))


def test_the_daemons_price_refresh_is_the_history_the_prices_page_charts(tmp_path: Path) -> None:
    from providers.sim import SimProvider
    from provisioner.control.daemon.service import Daemon
    from provisioner.dashboard.history import price_history

    sim_dir = tmp_path / "sim"
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        json.dumps(
            {
                "store": f"sqlite:///{tmp_path / 'd.db'}",
                "metrics": {"enabled": False},
                "dashboard": {"enabled": False},
                "providers": {"sim": {"state_dir": str(sim_dir), "mimic": "aws"}},
            }
        )
    )
    d = Daemon(str(cfg))
    try:
        d.open()
        d.refresh_prices()
        d.refresh_prices()
        history = price_history(d.store)
        assert [h["provider"] for h in history] == ["sim", "sim"]
        assert history[0]["quotes"] == len(d.store.prices("sim")) > 0
        cheapest = history[-1]["cheapest"]
        assert cheapest and all(
            (v["spot"] is None or v["spot"] > 0) and v["offers"] >= 1 for v in cheapest.values()
        )
        server = DashboardServer(d.store, port=0)
        server.start()
        try:
            doc = get_json(server.url + "prices?provider=sim")
            assert doc["history"] and all(k.startswith("sim:") for k in doc["history"])
            assert any(len(v.get("spot", [])) == 2 for v in doc["history"].values())
        finally:
            server.close()
    finally:
        if d.reconciler is not None:
            d.reconciler.close()
        if d.store is not None:
            d.store.close()
        SimProvider(sim_dir).shutdown_server(terminate_all=True)
