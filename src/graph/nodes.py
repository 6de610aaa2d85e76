"""The nodes of one turn; each reads the state and returns a partial update."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import openai
import psycopg
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_stream_writer
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command
from psycopg_pool import PoolTimeout

from src.graph import prompts
from src.graph.context.assemble import build_context as assemble_context
from src.graph.context.render import reply_text, row_tokens
from src.graph.conversation_state import ConversationState
from src.graph.deps import GraphDeps
from src.graph.memory.errors import log_failure
from src.graph.memory.facts import extract_pending
from src.graph.memory.summarizer import fold_before, summarize_due, summary_limits, window_rule
from src.graph.memory.window import LAG_FACTOR, carried, due, window_size
from src.graph.output_caps import was_cut
from src.graph.tokens import count_tools
from src.lang import lang_of
from src.storage.base import clean_json
from src.storage.delivery_repo import Delivery
from src.storage.turn_reads import read_turn

logger = logging.getLogger(__name__)

Row = dict[str, Any]


# save_response drops the turn's context once it is answered: the thread's last checkpoint
# then does not carry it, and the next turn, which builds its own, does not read it back
# (LangGraph loads the whole last checkpoint when a run starts). Each step's checkpoint
# still shows what the model saw.
ANSWERED: dict[str, Any] = {"context": []}


async def _answered(config: RunnableConfig, values: dict[str, Any]) -> dict[str, Any]:
    """Hand the turn's caller its reply (`configurable.on_answered`, called with
    save_response's values) and let it go on before the step's own bookkeeping (routing,
    its writes, the next checkpoint): the reply leaves as soon as it is stored. Return
    save_response's update."""
    tell = (config.get("configurable") or {}).get("on_answered")
    if tell is not None:
        tell(values)
        # The caller's wait ends in the loop's next turn and it goes on in the one after.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    return {**values, **ANSWERED}


class ModelFailure(RuntimeError):
    """The chat model failed or answered with nothing usable."""


# Failures FALLBACK_MODEL answers after the model's own retries: server errors (5xx),
# timeouts and lost connections; not a refused request (4xx), which another model of the
# same endpoint would most likely refuse too.
TRANSIENT = (openai.InternalServerError, openai.APIConnectionError)
# How long a turn whose prompt cannot carry every unsummarized message waits for the fold
# it starts, and for one already under way, before it goes on and says what it left out.
SYNC_FOLD_SECONDS = 10.0
JOIN_FOLD_SECONDS = 1.0


@dataclass
class Built:
    """The context a turn assembled, and what it found about its memory."""

    messages: list[BaseMessage]
    snapshot: list[dict[str, Any]]
    tokens: int
    missing: int
    """Unsummarized messages the prompt could not carry."""
    first_kept: Row | None
    """The oldest stored message the prompt carries (else the current one)."""
    summary_due: bool
    facts_due: bool


def _cap_fallback(language: str | None) -> str:
    return prompts.CAP_FALLBACK_REPLY[lang_of(language)]


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if out.get("created_at") is not None:
        out["created_at"] = out["created_at"].isoformat()
    if out.get("conversation_id") is not None:
        out["conversation_id"] = str(out["conversation_id"])
    return out


def _record(role: str, content: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"role": role, "content": content, "meta": meta}


def is_live(config: RunnableConfig) -> bool:
    """Tell whether the turn's caller watches it live (`configurable.live`): its model
    answers then stream out as `custom` events, and /stop can end it."""
    return bool((config.get("configurable") or {}).get("live"))


def interrupted(message: BaseMessage) -> bool:
    """Tell whether an answer is the part the model wrote before the user stopped it."""
    return bool(message.response_metadata.get("interrupted"))


async def _next_or_stop(chunks: Any, stop: asyncio.Event | None) -> AIMessageChunk | None:
    """Return the stream's next chunk, or None when it ends or `stop` is set first."""
    if stop is None:
        return await anext(chunks, None)
    if stop.is_set():
        return None
    step = asyncio.ensure_future(anext(chunks, None))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({step, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if step.done():
        return step.result()
    step.cancel()  # the model call's HTTP response is closed: the model stops writing
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await step
    return None


def with_images(messages: list[BaseMessage], config: RunnableConfig) -> list[BaseMessage]:
    """Attach the turn's photos (`configurable.images`, data URLs) to the user's current
    message as image parts. They ride in the config, not the state: checkpoints keep the
    message's text (with the photos' description), never the images."""
    images = (config.get("configurable") or {}).get("images")
    current = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
        None,
    )
    if not images or current is None:
        return messages
    message = messages[current]
    content: list[str | dict[str, Any]] = [
        {"type": "text", "text": message.text},
        *({"type": "image_url", "image_url": {"url": url}} for url in images),
    ]
    return [
        *messages[:current],
        message.model_copy(update={"content": content}),
        *messages[current + 1 :],
    ]


def with_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Give the context's messages, just made for this turn, each an id (a compression
    replaces them by id): its position, short and compressible, unlike a random id for
    every message. Set in place: a copy of each cost 0.3 ms a turn."""
    for i, message in enumerate(messages):
        if not message.id:
            message.id = f"c{i}"
    return list(messages)


def _turn_messages(state: ConversationState) -> list[BaseMessage]:
    """Return the messages the model and tools produced this turn (after the context)."""
    return list(state.get("messages") or [])


class Nodes:
    """The graph's nodes, bound to injected dependencies."""

    def __init__(self, deps: GraphDeps, tools: list[BaseTool]) -> None:
        self.deps = deps
        self.tools = tools
        self.tool_names = frozenset(t.name for t in tools)
        # The chat models bound to the tools, by name (bound once each).
        self._with_tools: dict[str, Any] = {}
        # Every request carries the tools' schemas: the context budget leaves room for them.
        self.tool_tokens = count_tools(tools, deps.counter)

    async def build_context(
        self, state: ConversationState, config: RunnableConfig
    ) -> dict[str, Any]:
        """Read the turn's memory in one round trip and assemble the model's context
        within the token budget of the turn's model.

        The request carries every message since /new (and not forgotten) that the
        running summary has not folded (see src/graph/memory/window.py): when the
        prompt cannot carry them all, the turn folds them itself first; if that fails
        too, the request says how many it leaves out, and it is logged.
        """
        model = self._model_name(state, config)
        built = await self._build(state, model)
        if built.missing:
            conversation_id = uuid.UUID(state["conversation_id"])
            logger.warning(
                "%d unsummarized messages of %s do not fit the prompt: folding them now",
                built.missing,
                conversation_id,
            )
            if await self._fold_now(state, model, built.first_kept):
                built = await self._build(state, model)
            if built.missing:
                logger.error(
                    "%d messages of %s are in neither the prompt nor the summary",
                    built.missing,
                    conversation_id,
                )
                notice = prompts.OMITTED_NOTE.format(count=built.missing)
                built = await self._build(state, model, notice)
        return {
            "context": with_ids(built.messages),
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
            "thread": built.snapshot,
            "context_tokens": built.tokens,
            "tool_rounds": 0,
            "model": model,
            "summary_due": built.summary_due,
            "facts_due": built.facts_due,
        }

    async def _build(self, state: ConversationState, model: str, notice: str = "") -> Built:
        """Read the turn's memory and assemble the context (see `build_context`)."""
        deps, settings = self.deps, self.deps.settings
        user_id = state["user_id"]
        conversation_id = uuid.UUID(state["conversation_id"])
        async with deps.conversations.pool.connection() as conn:
            reads = await read_turn(
                conn,
                user_id,
                conversation_id,
                # The current message and the window; what lags before it comes with
                # the unsummarized ones (usually fewer than the window).
                messages=settings.max_context + 1,
                lag=settings.max_context * (1 + LAG_FACTOR) + 1,
                facts_every=settings.facts_every,
                # Twice the prompt's share: the objective filter may leave some out.
                facts=2 * settings.max_facts_in_prompt,
                # Every compact is of an ended session: earlier conversations, and
                # earlier sessions of this one that ended by silence.
                compacts=settings.compacts_in_prompt,
            )
        user, current = reads.user, state.get("input_message_id")
        count = user["active_messages_count"] if user else None
        # Seed 000 counts the window before the current message is stored; storing it
        # counted it already.
        size = window_size(None if count is None else count - 1, settings.max_context)
        seen = {r["id"] for r in reads.messages}
        rows = [r for r in reads.unsummarized if r["id"] not in seen] + reads.messages
        rows.sort(key=lambda r: (r["created_at"], r["id"]))
        this = next((r for r in rows if r["id"] == current), None)
        rows = [r for r in rows if r["id"] != current]
        limits = summary_limits(settings, self.tool_tokens, model)
        rule = window_rule(settings, size, limits)
        history, hidden = carried(rows, rule)
        conv = reads.conversation
        values = dict(
            state,
            model=model,
            history=[_jsonable(r) for r in history],
            summary=conv["summary"] if conv else "",
            facts=[_jsonable(f) for f in reads.facts],
            compacts=[_jsonable(c) for c in reads.compacts],
            notice=notice,
        )
        messages, snapshot, tokens = assemble_context(
            values, settings, deps.counter, reserve=self.tool_tokens
        )
        shown = {e["id"] for e in snapshot}
        left_out = [r for r in history if not r["summarized"] and r["id"] not in shown]
        if len(reads.unsummarized) >= settings.max_context * (1 + LAG_FACTOR) + 1:
            hidden = max(hidden, 1)  # more than was read: the prompt cannot carry them
        kept = [r for r in history if r["id"] in shown]
        # After the reply the thread holds the current message and at least the answer.
        after = [*rows, {"id": current, "content": state["input_text"], "summarized": False}]
        after.append({"id": None, "content": "", "summarized": True})
        cost = functools.partial(row_tokens, counter=deps.counter)
        return Built(
            messages=messages,
            snapshot=snapshot,
            tokens=tokens,
            missing=hidden + len(left_out),
            first_kept=kept[0] if kept else this,
            summary_due=bool(due(after, rule, cost)),
            facts_due=conv is not None and conv["facts_pending"] >= settings.facts_every,
        )

    async def _fold_now(self, state: ConversationState, model: str, before: Row | None) -> bool:
        """Fold every unsummarized message before `before` (the oldest message the
        prompt keeps, else the current one) now, within the model's timeout; say
        whether it ran."""
        deps = self.deps
        conversation_id = uuid.UUID(state["conversation_id"])
        key = ("summary", conversation_id)
        if before is None or deps.backoff.waiting(key):
            return False
        try:
            running = deps.runs.running(key)
            if running is not None:
                # A fold under way (a slow model): a moment for it, not its whole time.
                await asyncio.wait_for(asyncio.shield(running), JOIN_FOLD_SECONDS)
            task = deps.runs.start(
                key,
                lambda: fold_before(
                    deps, state["user_id"], conversation_id, before, model, self.tool_tokens
                ),
            )
            # Not cancelled when the wait ends: it goes on and commits for a later turn.
            wait = min(deps.settings.llm_timeout, SYNC_FOLD_SECONDS)
            await asyncio.wait_for(asyncio.shield(task), wait)
        except Exception as exc:
            if not isinstance(exc, TimeoutError):
                deps.backoff.failed(key)
            log_failure(logger, f"folding the summary of {conversation_id} in the turn", exc)
            return False
        deps.backoff.succeeded(key)
        return True

    async def agent(
        self, state: ConversationState, config: RunnableConfig
    ) -> Command[Literal["tools", "log_tools", "save_response"]]:
        """Call the chat model (see `answer`) and go on where its answer leads: the tools it
        asked for, or the end of the turn (`route_after_agent`).

        The node says where it goes instead of a conditional edge reading the state
        afresh after it (a copy of every channel, 0.3 ms a turn).
        """
        update = await self.answer(state, config)
        then = self.route_after_agent(
            {
                "messages": update["messages"],
                "tool_rounds": update.get("tool_rounds", state.get("tool_rounds", 0)),
            }
        )
        return Command(update=update, goto=then)

    async def answer(self, state: ConversationState, config: RunnableConfig) -> dict[str, Any]:
        """Call the chat model; past the tool cap, call it without tools.

        A live turn (see `is_live`) streams the answer as it is written and ends early
        when the user stops it: what was written by then is the answer, marked
        `interrupted`, and no tool it asked for runs.
        """
        rounds = state.get("tool_rounds", 0)
        capped = rounds >= self.deps.settings.max_tool_rounds
        messages = with_images([*state["context"], *state["messages"]], config)
        if capped:
            messages.append(HumanMessage(prompts.CAP_REACHED_NOTE))
        name = self._model_name(state, config)
        taken: dict[str, Any] = {}
        try:
            answer = await self._call(name, capped, messages, state, config)
        except Exception as exc:
            fallback = self.deps.settings.fallback_model
            if not (fallback and fallback != name and isinstance(exc, TRANSIENT)):
                raise ModelFailure(f"model call failed: {type(exc).__name__}: {exc}") from exc
            logger.warning(
                "%s failed for %s (%s): %s answers", name, state["user_id"], exc, fallback
            )
            if is_live(config):
                get_stream_writer()({"tools": []})  # what it wrote is not the answer
            try:
                answer = await self._call(fallback, capped, messages, state, config)
            except Exception as again:
                raise ModelFailure(f"fallback failed: {type(again).__name__}: {again}") from again
            taken = {"model": fallback, "fallback": True}
        if not isinstance(answer, AIMessage):
            raise ModelFailure(f"model returned {type(answer).__name__}")
        if interrupted(answer):
            return {"messages": [answer], **taken}
        if capped and (answer.tool_calls or not reply_text(answer)):
            text = reply_text(answer) or _cap_fallback(state.get("language"))
            answer = AIMessage(text, id=answer.id, usage_metadata=answer.usage_metadata)
        if not answer.tool_calls and not reply_text(answer):
            raise ModelFailure("model returned an empty answer")
        if answer.tool_calls:
            # Arguments come back JSON-decoded: escapes may have made NUL or lone
            # surrogates, which no request body (UTF-8) and no jsonb column can carry.
            calls = [{**c, "args": clean_json(c["args"])} for c in answer.tool_calls]
            answer = answer.model_copy(update={"tool_calls": calls})
        if was_cut(answer):
            # Delivered all the same: a cut answer is better than none.
            logger.warning(
                "reply to %s cut at the output cap (%d chars)",
                state["user_id"],
                len(reply_text(answer)),
            )
        if answer.tool_calls:
            # The live reply shows what runs now instead of the text written before it.
            get_stream_writer()({"tools": [c["name"] for c in answer.tool_calls]})
        usage = dict(state.get("usage") or {"input": 0, "output": 0})
        if answer.usage_metadata:
            usage["input"] = usage.get("input", 0) + answer.usage_metadata.get("input_tokens", 0)
            usage["output"] = usage.get("output", 0) + answer.usage_metadata.get("output_tokens", 0)
        return {
            "messages": [answer],
            "tool_rounds": rounds + (1 if answer.tool_calls else 0),
            "usage": usage,
            **taken,
        }

    def _model_name(self, state: ConversationState, config: RunnableConfig) -> str:
        """Return the model of this call: a replay's choice (`configurable.model`), else
        the turn's, else LLM_MODEL."""
        chosen = (config.get("configurable") or {}).get("model")
        return str(chosen or state.get("model") or self.deps.settings.llm_model)

    async def _call(
        self,
        name: str,
        capped: bool,
        messages: list[BaseMessage],
        state: ConversationState,
        config: RunnableConfig,
    ) -> Any:
        """Call the chat model `name` (with the tools unless capped), streaming if live."""
        model: Any = self.deps.chat_model_named(name)
        if not capped and self.tools:
            if name not in self._with_tools:
                self._with_tools[name] = model.bind_tools(self.tools)
            model = self._with_tools[name]
        if is_live(config):
            return await self._stream(model, messages, state)
        return await model.ainvoke(messages)

    async def _stream(
        self, model: Any, messages: Sequence[BaseMessage], state: ConversationState
    ) -> AIMessage:
        """Call the model streaming: each piece of text goes to the stream writer as it
        comes; a stop ends the call, and what was written is the interrupted answer."""
        write = get_stream_writer()
        stop = self.deps.stops.get(state["user_id"])
        whole: AIMessageChunk | None = None
        if stop is None or not stop.is_set():
            chunks = aiter(model.astream(messages, stream_usage=True))
            try:
                while (chunk := await _next_or_stop(chunks, stop)) is not None:
                    whole = chunk if whole is None else whole + chunk
                    if chunk.text:
                        write({"text": chunk.text})
            finally:
                with contextlib.suppress(Exception):
                    await chunks.aclose()
        if stop is not None and stop.is_set():
            said = reply_text(whole) if whole is not None else ""
            text = said or prompts.STOPPED_EMPTY_REPLY[lang_of(state.get("language"))]
            logger.info("turn of %s stopped by the user", state["user_id"])
            return AIMessage(text, response_metadata={"interrupted": True})
        if whole is None:
            raise ModelFailure("model stream ended without a message")
        answer = message_chunk_to_message(whole)
        assert isinstance(answer, AIMessage)
        return answer

    def route_after_agent(
        self, state: ConversationState
    ) -> Literal["tools", "log_tools", "save_response"]:
        """Run the requested tools, or finish the turn (logging the tools that ran)."""
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tools"
        # Without tools there is nothing to log: skip the step and its checkpoint.
        return "log_tools" if state.get("tool_rounds", 0) else "save_response"

    async def log_tools(self, state: ConversationState) -> dict[str, Any]:
        """Record this turn's tool calls and results, then a `Tools used: ...` note.

        Nothing is written here: save_response stores these records with the reply in
        one transaction, so a failed turn leaves no tool records without their answer.
        """
        turn = _turn_messages(state)[:-1]  # the final answer is saved by save_response
        if not turn:
            return {"tools_used": [], "tool_records": []}
        used: list[str] = []
        records: list[dict[str, Any]] = []
        for message in turn:
            if isinstance(message, AIMessage):
                calls = [
                    {"id": c["id"], "name": c["name"], "args": c["args"]}
                    for c in message.tool_calls
                ]
                # The note is a system message: it names only tools we offer, never a
                # name the model made up.
                names = (
                    c["name"] if c["name"] in self.tool_names else "unknown tool"
                    for c in message.tool_calls
                )
                used.extend(n for n in names if n not in used)
                records.append(_record("assistant", message.text, {"tool_calls": calls}))
            elif isinstance(message, ToolMessage):
                meta = {
                    "tool_call_id": message.tool_call_id,
                    "name": message.name,
                    "status": message.status,
                }
                records.append(_record("tool", message.text, meta))
        records.append(_record("system", "Tools used: " + ", ".join(used)))
        return {"tools_used": used, "tool_records": records}

    async def save_response(
        self, state: ConversationState, config: RunnableConfig
    ) -> dict[str, Any]:
        """Persist the turn's tool records and reply, and advance seed 000's counter.

        All in one transaction, with the reply's outbox row when the turn answers a
        Telegram update (`configurable.delivery`): a crash after it resends the stored
        reply instead of running the turn again. If it fails, the reply is still
        returned to be sent: the user's message is stored, and the answer they waited
        for is not lost with it.
        """
        delivery = (config.get("configurable") or {}).get("delivery")
        answer = state["messages"][-1]
        reply = reply_text(answer)
        meta, shown = None, reply
        if interrupted(answer):
            # Stored as written (the model is told it was cut); shown with a mark.
            meta = {"interrupted": True}
            lang = lang_of(state.get("language"))
            if reply != prompts.STOPPED_EMPTY_REPLY[lang]:
                shown = f"{reply}…\n\n{prompts.STOPPED_MARK[lang]}"
        records = state.get("tool_records") or []
        stored = 1 + len(records) + 1
        conversation_id = uuid.UUID(state["conversation_id"])
        conversations = self.deps.conversations
        try:
            async with conversations.pool.connection() as conn:
                # Pipelined: the statements until the pipeline's sync are one transaction,
                # committed in one round trip; what they stored is read after it.
                async with conn.pipeline():
                    sent = [
                        await conversations.send_message(
                            conn, conversation_id, record["role"], record["content"], record["meta"]
                        )
                        for record in records
                    ]
                    # Each message stored advances seed 000's counter (APPEND_MESSAGE).
                    sent.append(
                        await conversations.send_message(
                            conn, conversation_id, "assistant", reply, meta
                        )
                    )
                    if delivery is not None:
                        await self.deps.delivery.add_reply(
                            Delivery.from_config(delivery), shown, conn=conn
                        )
                for message in sent:
                    await message()
        except (psycopg.Error, PoolTimeout, LookupError):
            logger.error(
                "storing the reply of %s failed; sending it unstored",
                state["conversation_id"],
                exc_info=True,
            )
            return await _answered(
                config, {"reply": shown, "stored_count": 1, "reply_stored": False}
            )
        return await _answered(
            config, {"reply": shown, "stored_count": stored, "reply_stored": True}
        )

    async def _within_budget(self, state: ConversationState, work: str) -> bool:
        """Tell whether the owner's token budget lets the work after the reply call
        models; if not, it waits (nothing marked: a later turn does it)."""
        budget = self.deps.budget
        if budget is None or await budget.allows(state["user_id"]):
            return True
        logger.info("%s of %s waits: over the token budget", work, state["user_id"])
        return False

    async def extract_facts(self, state: ConversationState) -> dict[str, Any]:
        """Extract facts from the messages not extracted yet; a failure loses nothing."""
        if not await self._within_budget(state, "fact extraction"):
            return {"facts_learned": 0}
        conversation_id = uuid.UUID(state["conversation_id"])
        stored = await self._memory_work(
            ("facts", conversation_id),
            "fact extraction",
            lambda: extract_pending(self.deps, state["user_id"], conversation_id),
        )
        return {"facts_learned": stored}

    async def summarize(self, state: ConversationState) -> dict[str, Any]:
        """Fold what is due into the running summary; a failure is logged, loses nothing."""
        if not await self._within_budget(state, "summary"):
            return {"summarized": 0}
        conversation_id = uuid.UUID(state["conversation_id"])
        model = state.get("model") or self.deps.settings.llm_model
        folded = await self._memory_work(
            ("summary", conversation_id),
            "summary",
            lambda: summarize_due(
                self.deps, state["user_id"], conversation_id, model, self.tool_tokens
            ),
        )
        return {"summarized": folded}

    async def _memory_work(
        self, key: tuple[str, uuid.UUID], what: str, work: Callable[[], Awaitable[int]]
    ) -> int:
        """Run memory work after the reply as the conversation's one run of that kind,
        shielded: when the owner's next turn makes this turn give way, the work goes on
        and commits instead of being cancelled and sent again (src/graph/memory/folds.py).
        A transient failure backs off; nothing is marked that was not stored."""
        deps = self.deps
        if deps.backoff.waiting(key) and deps.runs.running(key) is None:
            logger.info("%s of %s waits after a failure", what, key[1])
            return 0

        async def logged() -> int:
            try:
                done = await work()
            except Exception as exc:
                delay = deps.backoff.failed(key)
                log_failure(logger, f"{what} of {key[1]} (next try in {delay:.0f} s)", exc)
                return 0
            deps.backoff.succeeded(key)
            return done

        return int(await asyncio.shield(deps.runs.start(key, logged)))
