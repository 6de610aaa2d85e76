"""`tgagent web` in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium): the runs list, one turn, a replay side by side, keep as fork.

The server runs on this test's event loop; the browser is driven from a thread, so the
loop keeps serving while the browser waits. Without a browser the test says why and
skips, or fails when CI is set (`.ci/run` installs one). With TGAGENT_SCREENSHOTS=DIR
it saves the README's screenshots (web-runs.png, web-turn.png, web-replay.png) there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from src.devtools.checkpoints import CheckpointReader
from tests.conftest import make_settings
from tests.integration.test_devtools import REPLIES, Seeded
from tests.integration.web_server import serving

CHROMIUM = os.environ.get("TGAGENT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TGAGENT_CHROMEDRIVER", "/usr/bin/chromedriver")
INSTALL = "apt-get install chromium chromium-driver (as .ci/run does)"
WAIT = 20


def _missing() -> str | None:
    """Return why no browser can be driven here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]'"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} not found: {INSTALL}"
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    """Yield a headless Chromium; skip (fail under CI) when there is none."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"no browser for the web page's tests: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1100")
    # Both paths are given: Selenium Manager has nothing to look up or download.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: Any, name: str) -> None:
    """Save a screenshot for the README when TGAGENT_SCREENSHOTS names a directory."""
    folder = os.environ.get("TGAGENT_SCREENSHOTS")
    if folder:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(max(height + 120, 700), 2400))
        driver.save_screenshot(str(Path(folder) / name))
        driver.set_window_size(1400, 1100)


def drive(driver: Any, base: str, replayed: str) -> None:
    """Open the runs, a turn, replay it and keep it as a fork, as a developer would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT)
    driver.get(base + "/")
    table = wait.until(ec.presence_of_element_located((By.ID, "runs")))
    messages = [td.text for td in table.find_elements(By.CSS_SELECTOR, "tr.run td.message")]
    assert messages[0::2] == [
        "Hello",
        "Bye",
        "What is my cat called?",
        "Hi, I'm Alice and my cat is called Barsik",
    ]
    header = driver.find_element(By.TAG_NAME, "header")
    assert header.value_of_css_property("background-color") == "rgba(36, 41, 47, 1)"
    _shot(driver, "web-runs.png")

    row = table.find_element(By.XPATH, "//tr[td[text()='What is my cat called?']]")
    row.find_element(By.CSS_SELECTOR, "a.open").click()
    timeline = wait.until(ec.presence_of_element_located((By.ID, "timeline")))
    nodes = [s.text for s in timeline.find_elements(By.CSS_SELECTOR, ".step-head .node")]
    assert nodes[1:] == [
        "build_context",
        "agent",
        "tools",
        "agent",
        "log_tools",
        "save_response",
        "(end of turn)",
    ]
    visited = driver.find_elements(By.CSS_SELECTOR, "#graph g.visited")
    assert {g.get_attribute("data-node") for g in visited} >= {"agent", "tools", "log_tools"}
    first_call = driver.find_element(By.CSS_SELECTOR, "details.model-call[open]")
    roles = [td.text for td in first_call.find_elements(By.CSS_SELECTOR, "td.role")]
    assert roles[0] == "system" and "user" in roles and roles[-1] == "answer"
    assert "What is my cat called?" in first_call.text
    assert "calls search_history" in first_call.text
    _shot(driver, "web-turn.png")

    model = driver.find_element(By.NAME, "model")
    model.clear()
    model.send_keys("gpt-4.1-mini")
    driver.find_element(By.ID, "replay-button").click()
    wait.until(ec.presence_of_element_located((By.ID, "side-by-side")))
    recorded = driver.find_element(By.ID, "recorded")
    replay_column = driver.find_element(By.ID, "replayed")
    assert REPLIES[1] in recorded.text and replayed in replay_column.text
    assert recorded.location["y"] == replay_column.location["y"]  # side by side
    assert recorded.location["x"] < replay_column.location["x"]
    _shot(driver, "web-replay.png")

    driver.find_element(By.ID, "keep-button").click()
    wait.until(ec.alert_is_present()).dismiss()  # asked first: cancelled, nothing sent
    assert driver.find_elements(By.ID, "keep-form")
    driver.find_element(By.ID, "keep-button").click()
    wait.until(ec.alert_is_present()).accept()
    wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "h1"), "kept as a fork"))

    resources = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert resources and all(r.startswith(base) for r in resources), resources


async def test_the_page_in_a_real_browser(
    browser: Any, seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    llm.script_for("gpt-4.1-mini", "Barsik, replayed in the browser.", "Barsik, kept.")
    async with serving(pool, make_settings(llm)) as base:
        await asyncio.to_thread(drive, browser, base, "Barsik, replayed in the browser.")
    turns = await CheckpointReader(pool).turns(seeded.thread)
    assert turns[-1].head.source == "fork"
    await CheckpointReader(pool).load_values(turns[-1])
    assert turns[-1].reply == "Barsik, kept."
