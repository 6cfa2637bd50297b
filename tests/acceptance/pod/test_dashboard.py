"""The dashboard at ``/`` in a real headless Chromium (Selenium), against real `tenure serve` processes
on PostgreSQL: the pages show the pods and projects the API answers, follow a project to the other
pod after kill -9 of its holder (the DOM is polled, never a fixed sleep), show a tenant token only its
tenant's projects, insert API strings as text, and carry a Content-Security-Policy.

Screenshots of each page go to ``$TENURE_ARTIFACTS/dashboard/<test>/`` (else the test's tmp_path).
Chromium and chromedriver are Debian's (``/usr/bin/chromium``, ``/usr/bin/chromedriver``; ``.ci/run``
installs them). When they cannot start, the tests are skipped with the reason, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest

from tenure.pod.tokens import TokenStore
from tenure.store import Store
from tests.conftest import IN_CI
from tests.support.pods import Cluster, Pod, create, owner_of

log = logging.getLogger(__name__)
CHROMIUM = os.environ.get("TENURE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TENURE_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 30.0


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        _unavailable(f"selenium is not installed ({exc}); pip install -e '.[test]'")
    for tool in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(tool) or shutil.which(tool)):
            _unavailable(f"{tool} is missing; apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1100"):
        options.add_argument(arg)
    try:
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    except Exception as exc:  # noqa: BLE001 - any failure to start means "no browser here"
        _unavailable(f"headless Chromium did not start ({type(exc).__name__}: {str(exc).splitlines()[0]})")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chrome: Any) -> Iterator[Any]:
    """The module's browser with a clean session (no token left from the previous test)."""
    yield chrome
    try:
        chrome.execute_script("window.sessionStorage.clear()")
    except Exception:  # noqa: BLE001 - best effort: the page may be gone
        pass


@pytest.fixture
def artifacts(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    base = os.environ.get("TENURE_ARTIFACTS")
    folder = Path(base) / "dashboard" / request.node.name if base else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(driver: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot saved to {path}"
    log.info("dashboard screenshot: %s", path)
    print(f"dashboard screenshot: {path}")
    return path


# ---------------------------------------------------------------------------------------- reading the DOM

# One script reads a table whole (rows are replaced every second, so element handles go stale).
_PODS = """
return Array.from(document.querySelectorAll('#pods tbody tr[data-pod]')).map(r => ({
  id: r.dataset.pod, shown: r.cells[0].textContent, live: r.querySelector('.live').textContent,
  running: r.querySelector('.running').textContent, role: r.querySelector('.role').textContent,
  load: r.querySelector('.load').textContent}));
"""
_PROJECTS = """
return Array.from(document.querySelectorAll('#projects tbody tr[data-project]')).map(r => {
  const id = r.querySelector('.owner code.pod-id');
  return {ref: r.dataset.project, link: r.cells[0].textContent, status: r.querySelector('.status').textContent,
          owner: id ? id.textContent : null, generation: r.querySelector('.generation').textContent,
          href: r.querySelector('a').getAttribute('href')};
});
"""
_DEMAND = "return Array.from(document.querySelectorAll('#demand tbody tr[data-project]')).map(r => r.dataset.project)"
_HISTORY = "return Array.from(document.querySelectorAll('#history tbody tr[data-kind]')).map(r => r.dataset.kind)"
_STATE = "return document.getElementById('state').textContent"


def until(driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll the page (every 0.1 s) until ``condition`` returns something truthy; fail naming ``what``."""
    from selenium.common.exceptions import JavascriptException, StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(
            driver,
            timeout,
            poll_frequency=0.1,
            ignored_exceptions=(StaleElementReferenceException, JavascriptException),
        ).until(condition)
    except TimeoutException:
        state = driver.execute_script(_STATE)
        raise AssertionError(f"timed out waiting for the dashboard to show {what} (status line: {state!r})") from None


def pods_shown(driver: Any) -> list[dict[str, str]]:
    return list(driver.execute_script(_PODS))


def projects_shown(driver: Any) -> dict[str, dict[str, Any]]:
    return {row["ref"]: row for row in driver.execute_script(_PROJECTS)}


def api_projects(pod: Pod, token: str | None = None) -> dict[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with pod.client() as c:
        listed = c.get("/api/v1/projects", headers=headers)
        assert listed.status_code == 200, listed.text
        found = {}
        for p in listed.json()["projects"]:
            shown = c.get(f"/api/v1/projects/{p['tenant']}/{p['name']}", headers=headers).json()
            found[f"{p['tenant']}/{p['name']}"] = shown
        return found


def use_token(driver: Any, secret: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(secret)
    driver.find_element(By.ID, "token-use").click()


# ---------------------------------------------------------------------------------------- tests


@pytest.mark.postgres
def test_the_pages_show_the_cluster_and_follow_a_project_to_the_other_pod_after_kill_9(
    pg_cluster: tuple[Cluster, Store], browser: Any, artifacts: Path
) -> None:
    cluster, store = pg_cluster
    a = cluster.start("a", "--labels", "zone=eu", pull=False)
    create(a, "web")
    with a.client() as c:
        assert c.post("/api/v1/projects/acme/web/bring").status_code == 200
        assert c.put("/api/v1/projects/acme/web/files/state.txt", content=b"v1").status_code == 201
        assert c.post("/api/v1/projects/acme/web/checkpoint").status_code == 200
        # pending placement: no pod has the label it asks for
        r = c.post("/api/v1/projects", json={"tenant": "globex", "name": "db", "lifecycle_type": "PERMANENT"})
        assert r.status_code == 201, r.text
        r = c.put("/api/v1/projects/globex/db/placement", json={"selector": {"zone": "mars"}, "score": 2})
        assert r.status_code == 200, r.text
    b = cluster.start("b", "--labels", "zone=eu")
    a_id, b_id = a.pod_id(), b.pod_id()
    assert owner_of(store, "acme", "web") == (a_id, True)

    # the overview, served by b: the pods and projects the API answers
    browser.get(b.url + "/")
    with b.client() as c:
        api_pods = {p["id"]: p for p in c.get("/api/v1/pods").json()["pods"]}
        master = c.get("/api/v1/cluster/master")

    def both_pods_live(d: Any) -> list[dict[str, str]] | None:
        rows = pods_shown(d)
        live = {r["id"] for r in rows if r["live"] == "live"}
        return rows if {a_id, b_id} <= live else None

    rows = until(browser, both_pods_live, "both pods live")
    assert {r["id"] for r in rows} == set(api_pods)
    for row in rows:
        assert row["shown"] == row["id"]
        assert "/ 100" in row["load"], row
    assert "this pod" in next(r for r in rows if r["id"] == b_id)["role"]
    if master.status_code == 200 and master.json().get("pod_id"):
        until(
            browser,
            lambda d: "master" in next(r for r in pods_shown(d) if r["id"] == master.json()["pod_id"])["role"],
            "the master",
        )

    expected = api_projects(b)
    shown = until(
        browser,
        lambda d: (s := projects_shown(d)) and set(s) == set(expected) and s["acme/web"]["owner"] == a_id and s,
        "the API's projects with acme/web on a",
    )
    for ref, project in expected.items():
        assert shown[ref]["link"] == ref
        assert shown[ref]["status"] == project["status"]
        assert shown[ref]["generation"] == str(project["generation"])
        assert shown[ref]["href"] == "/ui/projects/" + ref

    def demand_matches(d: Any) -> bool:
        with b.client() as c:
            r = c.get("/api/v1/cluster/demand")
        if r.status_code == 404:
            return "not available" in d.find_element("id", "demand-summary").text
        pending = {p.get("project") or f"{p['tenant']}/{p['name']}" for p in r.json()["pending"]}
        return set(d.execute_script(_DEMAND)) == pending

    until(browser, demand_matches, "the API's demand")
    screenshot(browser, artifacts, "1-overview")

    # the project page, with its ownership timeline
    browser.get(b.url + "/ui/projects/acme/web")
    until(browser, lambda d: d.find_element("id", "project-owner").get_attribute("data-owner") == a_id, "owner a")
    assert browser.find_element("id", "project-status").text == "RUNNING"
    with b.client() as c:
        head = next(s for s in c.get("/api/v1/projects/acme/web/snapshots").json()["snapshots"] if s["head"])
    facts = browser.find_element("id", "project-facts").text
    assert facts.split("last checkpoint\n", 1)[1].startswith(head["id"] + " · "), facts
    with b.client() as c:
        history = c.get("/api/v1/projects/acme/web/history", params={"limit": 50})
    if history.status_code == 200:
        kinds = [e["kind"] for e in history.json()["events"]]
        assert kinds, history.text
        until(
            browser,
            lambda d: d.execute_script(_HISTORY)[:1] == kinds[:1],
            "the newest history event",
        )
    else:
        until(browser, lambda d: "not available" in d.find_element("id", "history-note").text, "history not available")
    screenshot(browser, artifacts, "2-project-before")

    # kill -9 of the holder: the overview shows a silent, then acme/web on b
    browser.get(b.url + "/")
    until(browser, lambda d: projects_shown(d).get("acme/web", {}).get("owner") == a_id, "acme/web on a")
    a.proc.kill()
    a.proc.wait(10)
    until(browser, lambda d: any(r["id"] == a_id and r["live"] == "silent" for r in pods_shown(d)), "a silent")
    moved = until(
        browser,
        lambda d: (
            (row := projects_shown(d).get("acme/web")) and row["owner"] == b_id and row["status"] == "RUNNING" and row
        ),
        "acme/web moved to b",
    )
    assert owner_of(store, "acme", "web") == (b_id, True)
    with b.client() as c:
        assert int(moved["generation"]) == c.get("/api/v1/projects/acme/web").json()["generation"]
    screenshot(browser, artifacts, "3-overview-after-kill")

    browser.get(b.url + "/ui/projects/acme/web")
    until(browser, lambda d: d.find_element("id", "project-owner").get_attribute("data-owner") == b_id, "owner b")
    if history.status_code == 200:
        until(
            browser,
            lambda d: b_id in d.find_element("id", "history").text,
            "a history event naming b",
        )
    screenshot(browser, artifacts, "4-project-after-kill")


@pytest.mark.postgres
def test_unsaved_work_shows_on_the_owner_and_work_lost_to_a_pause_is_listed_and_badged_on_every_pod(
    pg_cluster: tuple[Cluster, Store], browser: Any, artifacts: Path
) -> None:
    """A plain write shows as unsaved on its owner's overview; the owner is paused (SIGSTOP) past the TTL,
    another pod takes the project over, and once the paused pod resumes (SIGCONT) the write it never
    checkpointed is listed under ``preserved`` through the API of every pod, badged on the overview and
    listed on the project page."""
    cluster, store = pg_cluster
    a = cluster.start("a", pull=False)
    create(a, "web")
    with a.client() as c:
        assert c.post("/api/v1/projects/acme/web/bring").status_code == 200
        assert c.post("/api/v1/projects/acme/web/checkpoint").status_code == 200
        assert c.put("/api/v1/projects/acme/web/files/draft.txt", content=b"never checkpointed").status_code == 201
    browser.get(a.url + "/")
    until(
        browser,
        lambda d: (
            "unsaved"
            in d.execute_script(
                "const r = document.querySelector('#projects tr[data-project=\"acme/web\"] .saving');"
                " return r ? r.textContent : '';"
            )
        ),
        "acme/web unsaved on its owner",
    )
    b = cluster.start("b")
    a_id = a.pod_id()
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        until(browser, lambda d: owner_of(store, "acme", "web")[0] not in (a_id, None), "the takeover by b")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)

    def listed(pod: Pod) -> list[dict[str, Any]]:
        with pod.client() as c:
            return list(c.get("/api/v1/projects/acme/web").json()["preserved"])

    until(browser, lambda d: listed(a) and listed(b), "the preserved delta listed on both pods")
    (delta,) = listed(b)
    assert delta["paths"] == ["draft.txt"] and delta["pod_id"] == a_id and delta["lineage"] == 1
    browser.get(b.url + "/")
    until(
        browser,
        lambda d: (
            "1 lost"
            in d.execute_script(
                "const r = document.querySelector('#projects tr[data-project=\"acme/web\"] .lost');"
                " return r ? r.textContent : '';"
            )
        ),
        "the lost-work badge",
    )
    screenshot(browser, artifacts, "1-overview-lost-badge")
    browser.get(b.url + "/ui/projects/acme/web")
    until(
        browser,
        lambda d: (
            d.execute_script(
                "return Array.from(document.querySelectorAll('#preserved tr[data-delta]')).map(r => r.dataset.delta)"
            )
            == [delta["id"]]
        ),
        "the delta on the project page",
    )
    screenshot(browser, artifacts, "2-project-preserved")
    with b.client() as c:
        merged = c.post(f"/api/v1/mounts/{delta['id']}/recover", json={"into_project": True}, follow_redirects=True)
        assert merged.status_code == 200, merged.text
        assert (
            c.get("/api/v1/projects/acme/web/files/draft.txt", follow_redirects=True).content == b"never checkpointed"
        )


@pytest.mark.postgres
def test_a_tenant_token_sees_only_its_tenant_and_api_strings_stay_text(
    pg_cluster: tuple[Cluster, Store], browser: Any, artifacts: Path
) -> None:
    cluster, store = pg_cluster
    pod = cluster.start("a", pull=False)
    with pod.client() as c:
        for tenant, name in (("acme", "web"), ("acme", "api"), ("globex", "db")):
            r = c.post("/api/v1/projects", json={"tenant": tenant, "name": name, "lifecycle_type": "AUTO"})
            assert r.status_code == 201, r.text
    # the API validates names, labels and selectors; a row written behind its back must still show as text
    hostile = "<img src=x id=pwned onerror=\"document.title='pwned'\">"
    with psycopg.connect(cluster.db, autocommit=True) as conn:
        conn.execute(
            "UPDATE pods SET node_name = %s, labels = %s WHERE id = %s",
            (hostile, json.dumps({"zone": hostile}), pod.pod_id()),
        )
    tokens = TokenStore(store)
    _, acme = tokens.create("acme", admin=False, cluster=False, label="acme")
    _, admin = tokens.create(None, admin=True, cluster=False, label="ops")

    # the page is served without a token and holds none; the API now wants one
    page = httpx.get(pod.url + "/")
    assert page.status_code == 200
    assert acme not in page.text and admin not in page.text
    assert httpx.get(pod.url + "/api/v1/projects").status_code == 401

    browser.get(pod.url + "/")
    until(browser, lambda d: "needs an API token" in d.execute_script(_STATE), "the 401")
    assert projects_shown(browser) == {}
    screenshot(browser, artifacts, "1-no-token")

    use_token(browser, acme)
    expected = api_projects(pod, acme)
    assert set(expected) == {"acme/web", "acme/api"}
    shown = until(browser, lambda d: projects_shown(d) or None, "acme's projects")
    assert set(shown) == set(expected)
    assert all(ref.startswith("acme/") for ref in browser.execute_script(_DEMAND))
    assert browser.execute_script("return window.sessionStorage.getItem('tenure.dashboard.token')") == acme
    assert acme not in browser.page_source
    # the hostile pod row is shown as text, not parsed as markup
    until(browser, lambda d: f"zone={hostile}" in d.find_element("id", "pods").text, "the labels as text")
    assert hostile in browser.find_element("id", "here").text
    assert browser.find_elements("id", "pwned") == []
    assert browser.title != "pwned"
    screenshot(browser, artifacts, "2-tenant-acme")

    # another tenant's project page is "not found", like a project that does not exist
    browser.get(pod.url + "/ui/projects/globex/db")
    until(browser, lambda d: "not found" in d.find_element("id", "project-facts").text, "globex/db not found")
    screenshot(browser, artifacts, "3-tenant-acme-other-tenant")

    browser.get(pod.url + "/")
    use_token(browser, admin)
    until(browser, lambda d: set(projects_shown(d)) == set(api_projects(pod, admin)), "every project for admin")
    assert {"acme/web", "acme/api", "globex/db"} <= set(projects_shown(browser))
    screenshot(browser, artifacts, "4-admin")

    # forgetting the token clears what it could see
    browser.find_element("id", "token-forget").click()
    until(browser, lambda d: projects_shown(d) == {} and "needs an API token" in d.execute_script(_STATE), "cleared")


def test_the_pages_carry_a_content_security_policy_and_no_inline_script(tmp_path: Path) -> None:
    data = tmp_path / ".tenure"
    cluster = Cluster(tmp_path, f"sqlite:///{data}/tenure.db", f"file://{data}/objects")
    try:
        pod = cluster.start(".tenure", pull=False)
        check_headers(pod)
    finally:
        cluster.stop_all()


def check_headers(pod: Pod) -> None:
    for path in ("/", "/ui/projects/acme/" + quote("web"), "/ui/static/app.js", "/ui/static/style.css"):
        r = httpx.get(pod.url + path)
        assert r.status_code == 200, (path, r.status_code)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp, csp
        assert r.headers["x-content-type-options"] == "nosniff"
    missing = httpx.get(pod.url + "/ui/static/nothing.js")
    assert missing.status_code == 404 and "script-src 'self'" in missing.headers["content-security-policy"]
    html = httpx.get(pod.url + "/").text
    assert not re.search(r"\son[a-z]+\s*=", html, re.I), "an inline event handler"
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html, re.I), "an inline script"
    assert "innerHTML" not in httpx.get(pod.url + "/ui/static/app.js").text
