"""Time as tools: the owner's time zone (`set_timezone`, when the user says where they
are) and scheduled tasks (`schedule_task`, `cancel_task`: issue 35).

Like every tool, they act on the turn's owner only (`user_id` from the injected state,
never from the model's arguments). A task's instruction is the user's text: when it
runs, it comes back as the user's message of a turn, never as a system instruction.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState

from src.graph.deps import GraphDeps
from src.graph.timestamps import zone_named

State = Annotated[dict[str, Any], InjectedState]


def make_time_tools(deps: GraphDeps) -> list[BaseTool]:
    """Build set_timezone over the injected users repository."""

    @tool
    async def set_timezone(zone: str, state: State) -> str:
        """Set the user's time zone, in which you, their reminders and their tasks tell
        the time. Use it when the user says where they are or live now ("I moved to
        Berlin", "I'm in Tokyo this week"), or names their time zone.

        Args:
            zone: the IANA time zone name of the place, e.g. Europe/Berlin,
                America/New_York, Asia/Tokyo.
        """
        found = zone_named(zone)
        if found is None:
            return f"Error: {zone!r} is not an IANA time zone name (like Europe/Berlin)."
        await deps.users.set_timezone(state["user_id"], found.key)
        return f"The user's time zone is now {found.key}."

    return [set_timezone]
