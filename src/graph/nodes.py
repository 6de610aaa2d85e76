"""The nodes of one turn; each reads the state and returns a partial update."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from typing import Any, Literal, cast

import openai
import psycopg
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_stream_writer
from langgraph.types import Command
from psycopg_pool import PoolTimeout

from src.graph import prompts
from src.graph.context.render import RELAYS, relayed_tools, reply_text
from src.graph.conversation_state import ConversationState
from src.graph.deps import GraphDeps
from src.graph.lang import lang_of
from src.graph.model_calls import OverBudget
from src.graph.output_caps import was_cut
from src.graph.tokens import count_messages, count_tools, message_text
from src.graph.turn_context import TurnContext
from src.graph.window_fit import (
    REPLANS,
    SAID_BY_SERVER,
    WindowTooSmall,
    learned,
    tool_budget,
    tools_within,
)
from src.model_windows import EMPTY_STREAM
from src.model_windows import is_overflow as is_overflow_error
from src.storage.base import clean_json
from src.storage.delivery_repo import Delivery

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


class TooSmall(ModelFailure):
    """The model's window cannot hold even the system prompt and the message: waiting
    will not help (the server needs a larger window, or the message must be shorter)."""

    def __init__(self, text: str, cause: WindowTooSmall) -> None:
        super().__init__(text)
        self.window = cause.window
        self.need = cause.need


class EmptyAnswer(ModelFailure):
    """The chat model answered with neither text (whitespace at most) nor a tool call."""


# Failures FALLBACK_MODEL answers after the model's own retries: server errors (5xx),
# timeouts and lost connections; not a refused request (4xx), which another model of the
# same endpoint would most likely refuse too.
TRANSIENT = (openai.InternalServerError, openai.APIConnectionError)


def _cap_fallback(language: str | None) -> str:
    return prompts.CAP_FALLBACK_REPLY[lang_of(language)]


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


def _turn_messages(state: ConversationState) -> list[BaseMessage]:
    """Return the messages the model and tools produced this turn (after the context)."""
    return list(state.get("messages") or [])


class Nodes:
    """The graph's nodes, bound to injected dependencies."""

    def __init__(self, deps: GraphDeps, tools: list[BaseTool]) -> None:
        self.deps = deps
        self.tools = tools
        self.tool_names = frozenset(t.name for t in tools)
        mcp = deps.mcp.tools if deps.mcp is not None else []
        # The MCP servers' tools are offered to whom their server allows, turn by turn.
        self.own_tools = [t for t in tools if t not in mcp]
        # The chat models bound to the tools, by name and tool set (bound once each).
        self._with_tools: dict[tuple[str, tuple[str, ...]], Any] = {}
        # Every request carries the tools' schemas: the context budget leaves room for them.
        self.tool_tokens = count_tools(tools, deps.counter)
        # The tools that fit a small window, by the tokens their schemas may take.
        self._fitting: dict[int, list[BaseTool]] = {}
        self.context = TurnContext(deps, self.tool_tokens, self.tool_reserve)

    def tool_reserve(self, model: str) -> int:
        """Return what the tools offered to `model` take of a request (see `offered`)."""
        kept = self._own_within(model)
        if len(kept) == len(self.own_tools):
            return self.tool_tokens  # every tool, the MCP servers' too
        return count_tools(kept, self.deps.counter)

    def _own_within(self, model: str) -> list[BaseTool]:
        """Return our own tools whose schemas fit the window of `model` (all, usually)."""
        budget = tool_budget(self.deps.settings, model)
        if budget >= self.tool_tokens:
            return self.own_tools  # the usual case, without counting again
        if budget not in self._fitting:
            self._fitting[budget] = tools_within(self.own_tools, self.deps.counter, budget)
        return self._fitting[budget]

    async def build_context(
        self, state: ConversationState, config: RunnableConfig
    ) -> dict[str, Any]:
        """Assemble the model's context (src/graph/turn_context.py)."""
        return await self.context.node(state, self._model_name(state, config))

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
            answer, taken = await self._fitted(name, capped, messages, state, config)
        except OverBudget:
            raise  # the turn ends with the budget's sentence, not a model failure
        except WindowTooSmall as exc:
            raise TooSmall(str(exc), exc) from exc
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
            raise EmptyAnswer("model returned an empty answer")
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
        else:
            # The endpoint reported none (llama.cpp's servers in a stream): an estimate,
            # marked as such, rather than a call that cost nothing.
            counter = self.deps.counter
            sent = count_messages(messages, counter) + (0 if capped else self.tool_reserve(name))
            usage["input"] = usage.get("input", 0) + sent
            usage["output"] = usage.get("output", 0) + counter.count(message_text(answer))
            usage["estimated"] = True
        return {
            **taken,
            "messages": [answer],
            "tool_rounds": rounds + (1 if answer.tool_calls else 0),
            "usage": usage,
        }

    async def _fitted(
        self,
        name: str,
        capped: bool,
        messages: list[BaseMessage],
        state: ConversationState,
        config: RunnableConfig,
    ) -> tuple[Any, dict[str, Any]]:
        """Call the model; when its server refuses the request as too long for its
        window, plan the turn's context again within the window it taught
        (src/graph/window_fit.py) and call again. Return the answer and the new
        context's state update ({} when the first plan fitted)."""
        settings = self.deps.settings
        replanned: dict[str, Any] = {}
        known = settings.window(name)
        if known.source in SAID_BY_SERVER and not state.get("messages"):
            # A window the server said, too small for the prompt and message alone (the
            # context gave up everything else): said now, not after refusals every turn.
            tools = [] if capped else self.offered(state, name)
            need = count_messages(messages, self.deps.counter)
            need += count_tools(tools, self.deps.counter)
            if need >= known.planned:
                raise WindowTooSmall(name, known.tokens, need)
        for attempt in range(REPLANS + 1):
            before = settings.context_limit(name)
            tools = [] if capped else self.offered(state, name)
            try:
                return await self._call(name, capped, messages, state, config), replanned
            except Exception as exc:
                counter = self.deps.counter
                again = await learned(settings, name, before, exc, messages, tools, counter)
                if is_overflow_error(exc) and attempt and (not again or attempt == REPLANS):
                    # Planned within the window and refused still: the prompt and the
                    # message alone are too long for it.
                    need = count_messages([messages[0], messages[-1]], counter)
                    need += count_tools(tools, counter)
                    window = settings.window(name).tokens
                    raise WindowTooSmall(name, window, need) from exc
                if not again:
                    raise
            if is_live(config):
                get_stream_writer()({"tools": []})  # what it wrote is not the answer
            update = await self.context.node(cast(ConversationState, dict(state)), name)
            replanned = {k: v for k, v in update.items() if k not in ("messages", "tool_rounds")}
            messages = with_images([*replanned["context"], *state["messages"]], config)
            if capped:
                messages.append(HumanMessage(prompts.CAP_REACHED_NOTE))
        raise AssertionError("unreachable")  # pragma: no cover

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
        """Call the chat model `name` (with the tools unless capped), streaming if live.

        Its answer says its endpoint is up: memory work waiting out an outage of the same
        base URL is due now (src/graph/memory/folds.py)."""
        chat = self.deps.chat_model_named(name)
        model: Any = chat
        tools = self.offered(state, name)
        if not capped and tools:
            key = (name, tuple(t.name for t in tools))
            if key not in self._with_tools:
                self._with_tools[key] = model.bind_tools(tools)
            model = self._with_tools[key]
        if is_live(config):
            answer = await self._stream(model, messages, state)
        else:
            answer = await model.ainvoke(messages)
        self.deps.endpoint_answered(chat)
        return answer

    def offered(self, state: ConversationState, model: str | None = None) -> list[BaseTool]:
        """Return the tools this turn's request carries: our own, and the MCP tools the
        turn's author may use (src/graph/mcp/tools.py); on a window too small for all
        their schemas, the first that fit (src/graph/window_fit.py)."""
        own = self._own_within(model or self.deps.settings.llm_model)
        if len(own) < len(self.own_tools):
            return own
        if self.deps.mcp is None:
            return self.tools
        return [*self.own_tools, *self.deps.mcp.allowed(state)]

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
            except ValueError as exc:
                if EMPTY_STREAM not in str(exc) or whole is not None:
                    raise
            finally:
                with contextlib.suppress(Exception):
                    await chunks.aclose()
        if stop is not None and stop.is_set():
            said = reply_text(whole) if whole is not None else ""
            text = said or prompts.STOPPED_EMPTY_REPLY[lang_of(state.get("language"))]
            logger.info("turn of %s stopped by the user", state["user_id"])
            return AIMessage(text, response_metadata={"interrupted": True})
        if whole is None:
            # A 200 with no chunk at all: llama-cpp-python's server answers a streamed
            # request too long for its window so. Asked again whole, it says why.
            logger.warning("the model's stream for %s was empty: asking again", state["user_id"])
            answer = await model.ainvoke(messages)
            if not isinstance(answer, AIMessage):
                raise ModelFailure("model stream ended without a message")
            return answer
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
        meta: dict[str, Any] | None = None
        shown = reply
        if interrupted(answer):
            # Stored as written (the model is told it was cut); shown with a mark.
            meta = {"interrupted": True}
            lang = lang_of(state.get("language"))
            if reply != prompts.STOPPED_EMPTY_REPLY[lang]:
                shown = f"{reply}…\n\n{prompts.STOPPED_MARK[lang]}"
        records = state.get("tool_records") or []
        relays = relayed_tools(records)
        if relays:  # what it says may come from outside: search and memory say so
            meta = {**(meta or {}), RELAYS: relays}
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
