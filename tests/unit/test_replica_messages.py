"""How replicas share the pools out, and how a request passed to other replicas gets its answers."""

from __future__ import annotations

import asyncio
from collections import Counter

from corral.engine.leases import HOUSEKEEPING, spread
from corral.engine.messages import Answers, drain_message, parse_drain
from tests.unit import virtual_time

REPLICAS = [f"host-{i}:8080" for i in range(3)]


def test_every_replica_gets_its_share_of_the_pools() -> None:
    for count in range(1, 12):
        pools = [f"pool-{i}" for i in range(count)] + [HOUSEKEEPING]
        owners = spread(pools, REPLICAS)
        load = Counter(owners.values())
        assert set(owners) == set(pools)
        share = -(-len(pools) // len(REPLICAS))
        assert max(load.values()) <= share, (count, load)
        if len(pools) >= len(REPLICAS):
            assert set(load) == set(REPLICAS), f"{count} pools: a replica left with none: {load}"


def test_every_replica_computes_the_same_spread_whatever_order_it_lists_them_in() -> None:
    pools = ["alpha", "beta", "gamma", HOUSEKEEPING]
    assert spread(pools, REPLICAS) == spread(list(reversed(pools)), list(reversed(REPLICAS)))


def test_a_replica_leaving_moves_its_own_pools_and_few_others() -> None:
    pools = [f"pool-{i}" for i in range(30)]
    before = spread(pools, REPLICAS)
    after = spread(pools, REPLICAS[:2])
    moved = {pool for pool in pools if before[pool] != after[pool]}
    orphaned = {pool for pool in pools if before[pool] == REPLICAS[2]}
    assert orphaned <= moved
    assert len(moved - orphaned) <= len(pools) // 3, "most pools of the remaining replicas stay where they are"


def test_no_replicas_no_owners() -> None:
    assert spread(["alpha"], []) == {}


def test_a_request_gets_the_answers_sent_for_its_key_and_stops_when_it_has_enough() -> None:
    async def scenario() -> tuple[list[str], list[str], float]:
        answers = Answers()

        def send() -> None:
            loop = asyncio.get_running_loop()
            loop.call_soon(answers.answer, "other-key", "not mine")
            loop.call_soon(answers.answer, "key", "a")
            loop.call_soon(answers.answer, "key", "b")

        got = await answers.collect("key", send, timeout_s=5, enough=lambda got: len(got) >= 2)
        asked = virtual_time.now()
        unanswered = await answers.collect("key", lambda: None, timeout_s=5, enough=bool)
        return got, unanswered, virtual_time.now() - asked

    got, unanswered, waited = virtual_time.run(scenario())
    assert got == ["a", "b"]
    assert (unanswered, waited) == ([], 5.0), "a request nobody answers returns what it has when its time is up"


def test_a_request_nobody_takes_on_gives_up_after_first_within_s_and_one_taken_on_waits_out_its_timeout() -> None:
    async def scenario() -> list[tuple[list[str], float]]:
        answers = Answers()
        seen = []

        def answer_at_2_s() -> None:
            asyncio.get_running_loop().call_later(2, answers.answer, "key", "a")

        for send in (lambda: None, answer_at_2_s):
            asked = virtual_time.now()
            got = await answers.collect("key", send, timeout_s=30, enough=lambda got: len(got) >= 3, first_within_s=3)
            seen.append((got, virtual_time.now() - asked))
        return seen

    assert virtual_time.run(scenario()) == [([], 3.0), (["a"], 30.0)]


def test_a_drain_message_names_the_pool_and_the_change_and_anything_else_is_not_one() -> None:
    assert drain_message("gpu-large", True) == "~drain:1:gpu-large"
    assert parse_drain(drain_message("gpu-large", True)) == ("gpu-large", True)
    assert parse_drain(drain_message("small", False)) == ("small", False)
    assert parse_drain("~drain:1:a:b") == ("a:b", True)  # the pool is the rest, whatever it holds
    for payload in ("~drained", "~drain:", "~drain:1:", "~drain:yes:small", "~drain:2:small", "small", "~look"):
        assert parse_drain(payload) is None, payload
