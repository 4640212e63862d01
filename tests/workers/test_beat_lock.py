"""One beat sends for the whole cluster: the others wait, and one takes over when it dies."""

from __future__ import annotations

import time

import redis

from workers.beat import BeatLock


def test_only_one_beat_holds_the_lock_and_a_standby_takes_over_when_it_lapses(redis_url):
    client = redis.Redis.from_url(redis_url)
    leader, standby = BeatLock(client, ttl_s=0.5), BeatLock(client, ttl_s=0.5)
    assert leader.hold() is True
    assert standby.hold() is False
    assert leader.hold() is True  # renewing its own lock
    deadline = time.monotonic() + 10
    while not standby.hold():  # the leader stopped renewing (as a killed beat does)
        assert time.monotonic() < deadline, "the standby never took the lapsed lock"
        time.sleep(0.1)
    assert leader.hold() is False


def test_a_stopping_beat_hands_the_lock_over_at_once(redis_url):
    client = redis.Redis.from_url(redis_url)
    leader, standby = BeatLock(client), BeatLock(client)
    assert leader.hold() and not standby.hold()
    leader.release()
    assert standby.hold() is True
    leader.release()  # releasing a lock it no longer holds leaves the new holder alone
    assert standby.hold() is True and not leader.hold()


def test_a_beat_without_redis_sends_nothing():
    lock = BeatLock(redis.Redis(host="127.0.0.1", port=1, socket_timeout=0.5))
    assert lock.hold() is False
