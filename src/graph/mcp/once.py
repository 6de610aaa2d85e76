"""An MCP tool is called once per call of a turn, whatever runs the turn again.

A turn run again after its worker died (its update comes back and reuses the stored user
message), and `tgagent replay`, meet the same calls again, with new call ids: a call is
known by the turn's stored user message and its key, the tool, its arguments and which
such call of the turn it is (the model may call one tool twice with the same arguments
on purpose, and then it is called twice). Its record (src/storage/mcp_calls_repo.py) is
claimed before the call is sent: a later run finds it, and gets what the first run's
model was given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage

from src.storage.mcp_calls_repo import Recorded

# Said to the model in place of a call made before whose answer was lost with its
# process: the call is not sent again.
LOST = (
    "Error: an earlier run of this turn called {tool} and stopped before its answer came "
    "back; it is not called again, and whether it took effect is unknown. Tell the user."
)
# A replay without --live-tools, for a call the recorded turn did not make.
NOT_RECORDED = (
    "Error: the replay calls no MCP tool, and the recorded turn made no call of {tool} "
    "with these arguments (`tgagent replay --live-tools` calls the tools)."
)
# The record could not be written: the call is not made (it could be made twice).
UNRECORDED = "Error: {tool} could not be called now (its call could not be recorded); try again."


def _digest(args: Any) -> str:
    text = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:24]


def call_key(state: Mapping[str, Any], call_id: str, name: str, args: Mapping[str, Any]) -> str:
    """Return the key of the turn's tool call `call_id` (of `name`, with `args`): the
    tool, a digest of its arguments, and how many calls of the same tool with the same
    arguments the turn made before it (in the order the model asked for them)."""
    calls = [
        call
        for message in state.get("messages") or []
        if isinstance(message, AIMessage)
        for call in message.tool_calls
    ]
    # The model's own arguments (as stored), when the call is found: the same in a run
    # made again as in the first.
    mine = next((c for c in calls if c.get("id") == call_id), None)
    digest = _digest(mine["args"] if mine is not None else dict(args))
    before = 0
    for call in calls:
        if call is mine:
            break
        if call["name"] == name and _digest(call["args"]) == digest:
            before += 1
    return f"{name}:{digest}:{before}"


def reused(found: Recorded, tool: str) -> tuple[str, bool]:
    """Return what the model is given for a call made before: the recorded text, and
    whether the call succeeded."""
    if found.outcome == "running" or found.result is None:
        return LOST.format(tool=tool), False
    return found.result, found.outcome == "ok"
