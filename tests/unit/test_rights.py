"""The rights table (src/graph/rights.py): who may do what, and what a refusal says."""

from __future__ import annotations

import pytest

from src.graph.rights import Action, Role, may, refusal, role_of


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN, Role.TERMINAL])
@pytest.mark.parametrize("action", list(Action))
def test_owners_and_administrators_may_do_everything(role: Role, action: Action) -> None:
    assert may(role, action)


@pytest.mark.parametrize("role", [Role.MEMBER, Role.TASK])
def test_members_and_task_runs_keep_only_their_own_facts(role: Role) -> None:
    assert [a for a in Action if may(role, a)] == [Action.OWN_FACTS]


@pytest.mark.parametrize("state", [{}, {"role": None}, {"role": "root"}, {"role": "ADMIN"}])
def test_a_missing_or_unknown_role_is_a_plain_members(state: dict[str, object]) -> None:
    assert role_of(state) == Role.MEMBER
    assert not may(state.get("role"), Action.TIMEZONE)  # type: ignore[arg-type]


def test_a_refusal_says_why() -> None:
    said = refusal(Role.MEMBER, Action.TASKS)
    assert said.startswith("Refused:") and "administrators" in said and "tasks" in said
    assert "scheduled task's run" in refusal(Role.TASK, Action.TIMEZONE)
