"""`tgagent web` over HTTP: the real server on a free port, real PostgreSQL, the local
model server; runs filtered and paged, one turn, replay, the token rules, escaping."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from src.devtools.checkpoints import CheckpointReader
from src.devtools.common import DevtoolsError
from src.devtools.web.auth import Guard, is_loopback, without_token
from tests.conftest import make_settings
from tests.integration.test_devtools import ALICE, BOB, REPLIES, Seeded, _alice_turns
from tests.integration.web_server import serving

TOKEN = "s3cret-token-for-tests"
HOSTILE = "<script>alert(1)</script>"


def rows(page: str) -> list[str]:
    """Return the messages of the runs list, in the order shown."""
    return [
        re.sub(r"<[^>]+>", "", m).strip()
        for m in re.findall(r'<td class="message">(.*?)</td>', page)
    ][::2]


def xsrf(page: str) -> str:
    found = re.search(r'name="_xsrf" value="([^"]+)"', page)
    assert found, "no _xsrf field in the page"
    return found.group(1)


async def test_runs_list_filters_and_pages(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    llm.fail_next(3, 500)
    failed = await seeded.runtime.service.handle_message(BOB, "Fail please")
    assert not failed.ok
    async with serving(pool, make_settings(llm)) as base, httpx.AsyncClient(base_url=base) as web:
        everything = await web.get("/")
        assert everything.status_code == 200
        assert rows(everything.text) == [
            "Fail please",
            "Hello",
            "Bye",
            "What is my cat called?",
            "Hi, I&#x27;m Alice and my cat is called Barsik",
        ]
        alice = await web.get("/", params={"user": ALICE.owner_id})
        assert rows(alice.text) == rows(everything.text)[2:]
        by_thread = await web.get("/", params={"thread": seeded.bob_thread[:8]})
        assert rows(by_thread.text) == ["Fail please", "Hello"]
        tool = await web.get("/", params={"tool": "search_history"})
        assert rows(tool.text) == ["What is my cat called?"]
        errors = await web.get("/", params={"status": "error"})
        assert rows(errors.text) == ["Fail please"] and "status-error" in errors.text
        none = await web.get("/", params={"status": "incomplete", "user": BOB.owner_id})
        assert rows(none.text) == [] and 'id="no-runs"' in none.text

        seen, url = [], "/?limit=2&user=&status="
        for _ in range(4):
            page = await web.get(url)
            seen.append(rows(page.text))
            older = re.search(r'id="older" href="([^"]+)"', page.text)
            if older is None:
                break
            url = older.group(1).replace("&amp;", "&")
            assert "limit=2" in url and "before=" in url
        assert seen == [rows(everything.text)[i : i + 2] for i in (0, 2, 4)]

        scanned = await web.get("/", params={"tool": "search_history", "limit": 1})
        assert rows(scanned.text) == ["What is my cat called?"]

        for bad in ({"status": "bogus"}, {"user": "abc"}, {"limit": "0"}, {"before": "x y"}):
            assert (await web.get("/", params=bad)).status_code == 400, bad
        unknown = await web.get("/", params={"thread": "00000000"})
        assert unknown.status_code == 404 and "no checkpoints for thread" in unknown.text


async def test_turn_page_shows_path_timeline_messages_tools_and_usage(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.thread)
    tool_turn = turns[1]
    middle = tool_turn.steps[3].checkpoint_id  # any checkpoint of the turn opens it
    async with serving(pool, make_settings(llm)) as base, httpx.AsyncClient(base_url=base) as web:
        page = (await web.get(f"/turn/{seeded.thread}/{middle}")).text
        graph = await web.get("/graph")
        missing = await web.get(f"/turn/{seeded.thread}/ffffffff")
    assert "Turn 2 of 3" in page and REPLIES[1] in page
    visited = set(re.findall(r'<g class="node visited" data-node="([^"]+)"', page))
    assert visited == {"__start__", *tool_turn.nodes, "__end__"}
    assert 'class="node" data-node="summarize"' in page
    timeline = page[page.index('id="timeline"') : page.index("Sent to the model")]
    for node in tool_turn.nodes:
        assert f'<span class="node">{node}</span>' in timeline, node
    assert "tools wrote messages" in timeline and "save_response wrote reply" in timeline
    assert re.search(r'<span class="ms">\d+\.\d ms</span>', timeline)
    # Two model calls: the first was sent the system prompt and the user's message.
    assert page.count('class="model-call"') == 2
    first = page[page.index("Call 1:") : page.index("Call 2:")]
    assert '<td class="role">system</td>' in first and '<td class="role">user</td>' in first
    assert "What is my cat called?" in first and "calls search_history" in first
    assert re.search(r'<td class="role">user</td><td class="num">\d+</td>', first)
    tools = page[page.index('id="tools"') :]
    assert "search_history" in tools and "Barsik" in tools
    usage = page[page.index('id="usage"') :]
    assert usage.count("<td>reply</td>") == 2  # one row per model call of the reply
    assert f'value="{tool_turn.head.checkpoint_id}"' in page  # replayable from its start
    assert f'value="{tool_turn.last.checkpoint_id}"' not in page  # nothing runs after it
    assert graph.status_code == 200 and "graph TD;" in graph.text and "<svg" in graph.text
    assert missing.status_code == 404 and "has no checkpoint" in missing.text


async def test_user_text_is_escaped_everywhere(
    runtime_factory: Any, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    rt = await runtime_factory()
    llm.script('<img src=x onerror="alert(2)">')
    await rt.service.handle_message(ALICE, HOSTILE)
    await rt.service.drain()
    (turn,) = await CheckpointReader(pool).recent_turns(None, 1)
    async with serving(pool, make_settings(llm)) as base, httpx.AsyncClient(base_url=base) as web:
        listing = await web.get("/")
        page = await web.get(f"/turn/{turn.thread_id}/{turn.head.checkpoint_id}")
    for response in (listing, page):
        assert "<script>alert" not in response.text and "<img src=x" not in response.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in page.text


async def test_replay_side_by_side_and_keep_as_fork(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.thread)
    head = turns[1].head.checkpoint_id
    async with serving(pool, make_settings(llm)) as base, httpx.AsyncClient(base_url=base) as web:
        page = await web.get(f"/turn/{seeded.thread}/{head}")
        form = {"thread": seeded.thread, "checkpoint": head, "model": "gpt-4.1-mini"}
        forged = await web.post("/replay", data=form)  # no _xsrf field: refused
        assert forged.status_code == 403
        cross = await web.post(
            "/replay",
            data=form | {"_xsrf": xsrf(page.text)},
            headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
        )
        assert cross.status_code == 403

        llm.script_for("gpt-4.1-mini", "Barsik, replayed.")
        dry = await web.post("/replay", data=form | {"_xsrf": xsrf(page.text)})
        assert dry.status_code == 200
        recorded = dry.text[dry.text.index('id="recorded"') : dry.text.index('id="replayed"')]
        replayed = dry.text[dry.text.index('id="replayed"') :]
        assert REPLIES[1] in recorded and "Barsik, replayed." in replayed
        assert "gpt-4.1-mini" in replayed and "The replies differ." in dry.text
        assert len(await CheckpointReader(pool).turns(seeded.thread)) == 3  # a dry run

        keep = form | {"_xsrf": xsrf(dry.text), "commit": "1", "confirmed": ""}
        confirm = await web.post("/replay", data=keep)
        assert "Keep the replay as a fork?" in confirm.text
        assert len(await CheckpointReader(pool).turns(seeded.thread)) == 3
        llm.script_for("gpt-4.1-mini", "Barsik, kept.")
        kept = await web.post("/replay", data=keep | {"confirmed": "1"})
        assert kept.status_code == 200 and "kept as a fork" in kept.text
    forks = await CheckpointReader(pool).turns(seeded.thread)
    assert len(forks) == 4 and forks[-1].head.source == "fork"
    assert forks[-1].head.checkpoint_id in kept.text


async def test_a_replay_that_cannot_run_is_a_page_not_a_crash(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.thread)
    end = turns[0].last.checkpoint_id
    async with serving(pool, make_settings(llm)) as base, httpx.AsyncClient(base_url=base) as web:
        page = await web.get(f"/turn/{seeded.thread}/{end}")
        form = {"thread": seeded.thread, "checkpoint": end, "_xsrf": xsrf(page.text)}
        response = await web.post("/replay", data=form)
        bad = await web.post("/replay", data=form | {"thread": "../etc"})
    assert response.status_code == 404 and "nothing runs after it" in response.text
    assert bad.status_code == 400


async def test_beyond_loopback_every_request_needs_the_token(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="src.devtools.web")
    settings = make_settings(llm)
    async with (
        serving(pool, settings, host="0.0.0.0", token=TOKEN) as base,
        httpx.AsyncClient(base_url=base) as web,
    ):
        for path in ("/", "/graph", "/static/web.css", f"/turn/{seeded.thread}/x"):
            refused = await web.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await web.get("/", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await web.get("/", params={"token": "wrong"})).status_code == 401
        bearer = await web.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200 and "Hello" in bearer.text
        # A bearer client needs no _xsrf field: a cross-site form cannot send the header.
        post = await web.post(
            "/replay",
            data={"thread": "x", "checkpoint": "y/z"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert post.status_code == 400

        opened = await web.get("/", params={"user": ALICE.owner_id, "token": TOKEN})
        assert opened.status_code == 302
        assert opened.headers["Location"] == f"/?user={ALICE.owner_id}"
        cookie = opened.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        assert web.cookies.get("tgagent_web")
        followed = await web.get(opened.headers["Location"])
        assert followed.status_code == 200 and rows(followed.text)[0] == "Bye"
        assert (await web.get("/static/web.css")).status_code == 200
        # The cookie holds an HMAC of the token: the token itself is no cookie.
        async with httpx.AsyncClient(base_url=base, cookies={"tgagent_web": TOKEN}) as other:
            assert (await other.get("/")).status_code == 401
    logged = caplog.text
    assert f"302 GET /?user={ALICE.owner_id}" in logged and TOKEN not in logged


def test_listening_beyond_loopback_without_a_token_is_refused() -> None:
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com"):
        with pytest.raises(DevtoolsError, match="WEB_TOKEN") as exc:
            Guard.for_host(host, None)
        assert exc.value.code == 2 and not is_loopback(host)
    for host in ("127.0.0.1", "127.5.5.5", "::1", "[::1]", "localhost"):
        assert Guard.for_host(host, None).token is None and is_loopback(host)
    assert Guard.for_host("0.0.0.0", TOKEN).token == TOKEN
    assert without_token("/turn/a/b?token=x&user=1") == "/turn/a/b?user=1"


async def test_loopback_without_a_token_refuses_a_foreign_host(
    pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host."""
    async with serving(pool, make_settings(llm)) as base, httpx.AsyncClient(base_url=base) as web:
        assert (await web.get("/graph")).status_code == 200
        rebound = await web.get("/graph", headers={"Host": "evil.example:8765"})
        assert rebound.status_code == 403
