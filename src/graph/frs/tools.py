"""FRS tools (seed 003) as the model is offered them: view_thread, compress_last and
compress_range (with a parameter really named `from`). What they do is in `frs.ops`."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langchain_core.tools.base import ArgsSchema
from langgraph.prebuilt import InjectedState
from pydantic import AliasChoices, BaseModel, Field, create_model

from src.graph.deps import GraphDeps
from src.graph.frs.ops import FrsTools
from src.graph.rights import Action, may, refusal, role_of
from src.storage.squash_repo import SquashRepository

# Filled in by the graph, never by the model: left out of the schema it is offered.
INJECTED = frozenset({"state", "tool_call_id"})

State = Annotated[dict[str, Any], InjectedState]
CallId = Annotated[str, InjectedToolCallId]


class ExplicitSchemaTool(StructuredTool):
    """A StructuredTool that offers the model the JSON schema of its arguments as written.

    langchain-core derives the model-facing schema from the signature pydantic builds,
    which has no parameter named `from` (a keyword): the field silently disappears, and
    an alias makes it advertise `from_` instead. Seed 003 names the parameter `from`.
    """

    @property
    def tool_call_schema(self) -> ArgsSchema:
        schema_model = self.args_schema
        if not (isinstance(schema_model, type) and issubclass(schema_model, BaseModel)):
            return super().tool_call_schema
        schema = schema_model.model_json_schema()
        properties = {
            name: {k: v for k, v in prop.items() if k != "title"}
            for name, prop in schema["properties"].items()
            if name not in INJECTED
        }
        required = [name for name in schema.get("required", []) if name in properties]
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "description": self.description,
        }


def _args_model(name: str, **fields: Any) -> type[BaseModel]:
    return create_model(name, **fields, state=(State, ...), tool_call_id=(CallId, ...))


def _descriptions(numbering: str) -> dict[str, str]:
    if numbering == "absolute":
        where = "the message numbers shown as `[n] Role:`, gaps are fine"
        after = "Other messages keep their numbers; the summary takes the first number."
    else:
        where = "the positions shown as `[i] Role:` right now, 1 = the oldest"
        after = "Afterwards the messages after the range move up: use the new positions."
    keep = (
        "The originals are archived and leave your context for good: keep in the summary "
        "every fact, number, name, decision and open question you may still need. A tool "
        "call and its results are compressed together; the user's latest message cannot "
        "be compressed. " + after
    )
    return {
        "view_thread": (
            "Show this conversation's numbered thread as you see it: for each message its "
            f"{'number' if numbering == 'absolute' else 'position'}, role, size in tokens "
            "and the start of its text, with totals. Use it to choose what to compress."
        ),
        "compress_range": (
            "Replace the messages `from`..`to` (inclusive; " + where + ") with one summary "
            "message you write, to free context from what you no longer need verbatim: long "
            "tool results, finished sub-tasks, settled digressions. " + keep
        ),
        "compress_last": (
            "Replace the last `count` messages before the user's latest message with one "
            "summary message you write (for example a finished tool-heavy sub-task). " + keep
        ),
        "key": where,
    }


def make_frs_tools(deps: GraphDeps, squashes: SquashRepository | None = None) -> list[BaseTool]:
    """Build view_thread, compress_last and compress_range over the injected dependencies."""
    frs = FrsTools(deps, squashes or SquashRepository(deps.conversations.pool))
    text = _descriptions(frs.numbering)
    key = text["key"]

    async def view_thread(state: State) -> str:
        return await frs.view_thread(state)

    async def compress_last(state: State, tool_call_id: CallId, **args: Any) -> Any:
        if not may(role_of(state), Action.COMPRESS):
            return refusal(role_of(state), Action.COMPRESS)
        return await frs.compress_last(state, tool_call_id, args["count"], args["summary"])

    async def compress_range(state: State, tool_call_id: CallId, **args: Any) -> Any:
        if not may(role_of(state), Action.COMPRESS):
            return refusal(role_of(state), Action.COMPRESS)
        return await frs.compress_range(
            state, tool_call_id, args["from"], args["to"], args["summary"]
        )

    summary_field = (
        str,
        Field(description="What the replaced messages said that may still matter."),
    )
    return [
        ExplicitSchemaTool.from_function(
            coroutine=view_thread,
            name="view_thread",
            description=text["view_thread"],
            args_schema=create_model("ViewThreadArgs", state=(State, ...)),
        ),
        ExplicitSchemaTool.from_function(
            coroutine=compress_last,
            name="compress_last",
            description=text["compress_last"],
            args_schema=_args_model(
                "CompressLastArgs",
                count=(int, Field(description="How many messages to replace (at least 1).")),
                summary=summary_field,
            ),
        ),
        ExplicitSchemaTool.from_function(
            coroutine=compress_range,
            name="compress_range",
            description=text["compress_range"],
            args_schema=_args_model(
                "CompressRangeArgs",
                **{
                    "from": (
                        int,
                        Field(
                            description=f"First message to replace: {key}.",
                            validation_alias=AliasChoices("from", "from_"),
                        ),
                    ),
                    "to": (int, Field(description=f"Last message to replace (inclusive): {key}.")),
                    "summary": summary_field,
                },
            ),
        ),
    ]
