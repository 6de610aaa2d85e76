"""The allowlist and the per-user rate limit."""

from __future__ import annotations

from src.bot.access import AccessPolicy, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_empty_allowlist_admits_everyone() -> None:
    policy = AccessPolicy.of([], [])
    assert policy.open and policy.allows(1) and policy.allows(2, -100)


def test_allowlist_and_admins() -> None:
    policy = AccessPolicy.of([1, 2], [9])
    assert policy.allows(1) and policy.allows(2) and policy.allows(9)
    assert not policy.allows(3) and not policy.allows(3, 3)
    assert policy.is_admin(9) and not policy.is_admin(1)


def test_admins_alone_make_a_closed_bot_open_only_to_them() -> None:
    policy = AccessPolicy.of([], [9])
    assert not policy.open  # ADMIN_USER_IDS alone close the bot to everyone else
    assert policy.allows(9) and policy.allows(9, -100)
    assert not policy.allows(1) and not policy.allows(1, -100)


def test_owners_the_jobs_may_serve() -> None:
    """A memory owner is a user (private chat) or a group (negative id)."""
    assert AccessPolicy.of([], []).admits_owner(5) and AccessPolicy.of([], []).admits_owner(-5)
    policy = AccessPolicy.of([1, -100500], [9])
    assert policy.admits_owner(1) and policy.admits_owner(9) and policy.admits_owner(-100500)
    assert not policy.admits_owner(2) and not policy.admits_owner(-100501)
    admins_only = AccessPolicy.of([], [9])
    assert admins_only.admits_owner(9) and not admins_only.admits_owner(-100500)


def test_allowed_group_admits_its_members() -> None:
    policy = AccessPolicy.of([1, -100500], [])
    assert policy.allows(7, -100500)
    assert not policy.allows(7, -1)


def test_rate_limit_sliding_window() -> None:
    clock = Clock()
    limiter = RateLimiter(3, period=60, clock=clock)
    assert [limiter.allow(1) for _ in range(4)] == [True, True, True, False]
    assert limiter.allow(2)  # other users are independent
    clock.now += 30
    assert not limiter.allow(1)
    clock.now += 30.5  # the first three left the window
    assert limiter.allow(1)


def test_refused_messages_do_not_extend_the_wait() -> None:
    clock = Clock()
    limiter = RateLimiter(1, period=60, clock=clock)
    assert limiter.allow(1)
    for _ in range(50):
        clock.now += 1
        assert not limiter.allow(1)
    clock.now += 11
    assert limiter.allow(1)


def test_zero_means_no_limit() -> None:
    limiter = RateLimiter(0)
    assert all(limiter.allow(1) for _ in range(1000))
    assert len(limiter) == 0


def test_notify_once_per_window() -> None:
    clock = Clock()
    limiter = RateLimiter(1, period=60, clock=clock)
    assert limiter.should_notify(1) and not limiter.should_notify(1)
    clock.now += 61
    assert limiter.should_notify(1)


def test_idle_users_are_forgotten() -> None:
    clock = Clock()
    limiter = RateLimiter(5, period=60, clock=clock)
    for user in range(2000):
        limiter.allow(user)
    clock.now += 120
    limiter.allow(99999)
    assert len(limiter) < 10
