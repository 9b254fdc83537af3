"""KIP-253 in-order delivery, the consumer half (issue #14): a consumer group on the simulated
cluster, through the stable CLI, while a keyed produce load runs through expand and shrink."""

from __future__ import annotations

import threading

import pytest

from broker_agent.contract.choices import ErrorCode
from broker_agent.contract.client import AgentError

pytestmark = pytest.mark.integration


class KeyedLoad:
    """``sim produce --keyed`` over and over in a thread: the topic is never idle."""

    def __init__(self, sim, topic: str):
        self.sim, self.topic = sim, topic
        self.stop = threading.Event()
        self.runs = 0
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            proc = self.sim.cli(
                "produce", "--topic", self.topic, "--records", "400", "--keyed",
                "--batch-size", "100", check=False,
            )  # fmt: skip
            if proc.returncode:
                self.failures.append(proc.stderr)
            self.runs += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(120)


def _wait_runs(load: KeyedLoad, n: int) -> None:
    target = load.runs + n
    while load.runs < target and load.thread.is_alive():
        load.stop.wait(0.2)


def _summary(stdout: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (line.split(":") for line in stdout.strip().splitlines())}


def _scenario(sim, topic: str, *extra: str) -> dict[str, int]:
    """Keyed records; a group consumes part; expand; produce; consume; shrink; produce;
    consume - with the producer running the whole time."""
    sim.cli("create-topic", topic, "--partitions", "2", "--replication-factor", "2", *extra)
    group = ["--topic", topic, "--group", "g"]
    with KeyedLoad(sim, topic) as load:
        _wait_runs(load, 2)
        sim.cli("consume", *group, "--max-records", "300")
        sim.cli("expand-partitions", topic, "--to", "4")
        _wait_runs(load, 2)
        sim.cli("consume", *group, "--max-records", "700")
        sim.cli("consume", *group)
        sim.cli("shrink-partitions", topic, "--to", "2")
        _wait_runs(load, 2)
        sim.cli("consume", *group, "--max-records", "500")
    assert not load.failures, load.failures
    proc = sim.cli("consume", *group, "--verify", check=False)
    res = _summary(proc.stdout)
    res["exit"] = proc.returncode
    res["acked"] = load.runs * 400
    return res


def test_a_group_gets_every_key_in_order_through_expand_and_shrink_under_load(sim_factory):
    sim = sim_factory(3, 1)
    res = _scenario(sim, "orders")
    assert res["consumed"] >= res["acked"] > 0
    assert (res["lost"], res["duplicated"], res["order violations"]) == (0, 0, 0), res
    assert res["exit"] == 0
    # the group's positions are the controller's, persisted: a new invocation resumes there
    view = sim.controller.group("g")
    assert set(view.offsets["orders"]) >= {0, 1}
    again = sim.cli("consume", "--topic", "orders", "--group", "g")
    assert again.stdout == ""  # nothing new, nothing re-delivered

    # without the barrier the same scenario may reorder keys; nothing is lost or duplicated
    res = _scenario(sim, "orders.unordered", "--config", "enable.ordered.delivery=false")
    assert (res["lost"], res["duplicated"]) == (0, 0), res


def test_produce_rules_of_ordered_delivery(sim_factory):
    """A produce must name the count on an ordered topic; a marked partition takes nothing."""
    sim = sim_factory(2, 1)
    sim.controller.create_topic("strict", 2, 1)
    sim.controller.alter_partition_count("strict", 3)

    def leader_of(p: int):
        part = next(x for x in sim.controller.topic("strict").partitions if x.partition == p)
        return sim.agent(part.leader)

    def refusal(p: int, count: int | None) -> str | None:
        try:
            leader_of(p).produce(
                "strict", p, [{"key": None, "value": "x"}], undeleted_partition_count=count
            )
        except AgentError as exc:
            return exc.error
        return None

    from .conftest import wait_until

    # a record in partition 2 keeps it, once marked, until retention drains it: an empty marked
    # partition is removed at its leader's next heartbeat, which would race the checks below
    wait_until(lambda: refusal(2, 3) is None, 20, what="partition 2 takes a produce at U=3")
    sim.controller.alter_partition_count("strict", 2)  # partition 2 marked for deletion
    wait_until(lambda: refusal(0, 2) is None, 20, what="partition 0 takes a produce at U=2")
    assert refusal(0, None) == ErrorCode.INVALID_REQUEST  # no count on an ordered topic
    assert refusal(0, 3) == ErrorCode.INVALID_PARTITION_METADATA  # a stale count
    assert refusal(2, 2) == ErrorCode.INVALID_PARTITION_METADATA  # marked for deletion
    assert refusal(2, 3) == ErrorCode.INVALID_PARTITION_METADATA
    # a fetch naming a stale count is refused too (KIP-253 consumer step 6)
    with pytest.raises(AgentError) as exc:
        leader_of(0).fetch("strict", 0, 0, undeleted_partition_count=3)
    assert exc.value.error == ErrorCode.INVALID_PARTITION_METADATA

    sim.controller.create_topic("loose", 2, 1, {"enable.ordered.delivery": "false"})
    part = sim.controller.topic("loose").partitions[0]
    wait_until(
        lambda: sim.agent(part.leader).produce("loose", 0, [{"key": None, "value": "y"}]),
        20,
        what="a produce without a count on an unordered topic",
    )


def test_sim_cli_partition_commands_say_what_is_wrong(sim_factory):
    sim = sim_factory(1, 1)
    sim.cli("create-topic", "t", "--partitions", "2", "--replication-factor", "1")
    bad = sim.cli("expand-partitions", "t", "--to", "2", check=False)
    assert (
        bad.returncode == 1
        and bad.stderr.strip() == "error: --to must be above the current count 2"
    )
    bad = sim.cli("shrink-partitions", "t", "--to", "1", check=False)
    assert (
        bad.returncode == 1 and "INVALID_PARTITIONS" in bad.stderr and "Traceback" not in bad.stderr
    )
    bad = sim.cli("consume", "--topic", "t", "--max-records", "3", check=False)
    assert bad.returncode == 1 and "needs --group" in bad.stderr


# -- expansions of any size, and shrink then re-expansion (issue #37 point 3) ------------------


def _ledger(sim, group: str, topic: str):
    """The group's delivery ledger, as ``sim consume --group`` writes it (``--verify`` reads)."""
    path = sim.data / "ledger" / "groups" / group / f"{topic}.delivered"
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a")


def _consume_adversarially(sim, topic: str, group: str, members: int, load: KeyedLoad) -> None:
    """``members`` members of ``group`` poll in rounds, each round the member holding the
    highest partition first: a member reading partitions made by the expansion always polls
    before the members holding the partitions those keys were in - the order that shows a
    creation gate opened too early. Runs one more produce run under load, then drains."""
    from broker_agent.simulator.group_consumer import GroupConsumer

    ledger = _ledger(sim, group, topic)

    def sink(batch) -> None:
        ledger.write(
            "".join(f"{r.value.split('|')[0]}\t{r.partition}\t{r.offset}\n" for r in batch)
        )
        ledger.flush()

    group_members = [
        GroupConsumer(sim.controller, sim.secret, group, [topic], sink=sink) for _ in range(members)
    ]
    try:
        for m in group_members:
            m.join()
        for m in group_members:  # everyone's assignment in the final generation
            m.join()
        until = load.runs + 1
        idle = 0
        for _ in range(2000):
            delivered = transient = False
            for m in sorted(group_members, key=lambda m: -max(m.assignment.get(topic) or [-1])):
                batch, held = m.poll()
                delivered |= bool(batch)
                transient |= held
            if load.runs >= until and not load.stop.is_set():
                load.stop.set()
                load.thread.join(120)
            idle = 0 if delivered or transient or not load.stop.is_set() else idle + 1
            if idle >= 2:  # two quiet rounds after the load stopped: all delivered
                return
        raise AssertionError("the group never caught up")
    finally:
        for m in group_members:
            m.leave()
        ledger.close()


def _verify(sim, topic: str, group: str, load: KeyedLoad) -> dict[str, int]:
    assert not load.failures, load.failures
    proc = sim.cli("consume", "--topic", topic, "--group", group, "--verify", check=False)
    res = _summary(proc.stdout)
    res["acked"] = load.runs * 400
    return res


@pytest.mark.parametrize(
    ("n", "u"),
    [(2, 3), (2, 8), (3, 13), (1, 16)],
    ids=["2-3", "2-8", "3-13", "1-16"],
)
def test_every_key_stays_in_order_through_an_expansion_of_any_size(sim_factory, n, u):
    """KIP-253 consumer step 4.2: a partition made by an expansion waits on the first of its
    ancestors that existed before it - not its split parent, which an expansion by more than
    one doubling made too (2 -> 8: partition 6 splits 2, but its keys were in 0). Keyed load
    before, across and after the expansion; members that own the new partitions read first."""
    sim = sim_factory(2, 1)
    topic = f"grow.{n}.{u}"
    sim.cli("create-topic", topic, "--partitions", str(n), "--replication-factor", "1")
    with KeyedLoad(sim, topic) as load:
        _wait_runs(load, 1)  # records under the old count that no member has read
        sim.cli("expand-partitions", topic, "--to", str(u))
        _wait_runs(load, 1)
        _consume_adversarially(sim, topic, "g", min(u, 4), load)
    res = _verify(sim, topic, "g", load)
    assert res["consumed"] >= res["acked"] > 0
    assert (res["lost"], res["order violations"]) == (0, 0), res


def test_a_group_keeps_key_order_and_fetches_after_a_shrink_and_a_re_expansion(sim_factory):
    """Shrink then re-expand (KIP-253): the group drained partitions 2 and 3 and committed
    offsets there; once the controller removed them, the coordinator dropped those commits, so
    when an expansion (2 -> 8) makes 2 and 3 again - empty, from offset 0 - the group starts
    them fresh behind the creation gate instead of fetching past their end from a stale
    position. Every key stays in order throughout."""
    sim = sim_factory(2, 1)
    topic = "again"
    sim.cli("create-topic", topic, "--partitions", "2", "--replication-factor", "1")
    with KeyedLoad(sim, topic) as load:
        _wait_runs(load, 1)
        sim.cli("expand-partitions", topic, "--to", "4")
        _wait_runs(load, 1)
        sim.cli("shrink-partitions", topic, "--to", "2")
        _wait_runs(load, 1)
        _consume_adversarially(sim, topic, "g", 4, load)
    committed = sim.controller.group("g").offsets[topic]
    assert committed[2] > 0 and committed[3] > 0  # drained by the group

    from .conftest import wait_until

    for p in (2, 3):  # DeleteRecords up to the end: empty, so the controller removes them
        part = sim.partition(topic, p)
        end = sim.agent(part.leader).fetch(topic, p, 0, 1, undeleted_partition_count=2)
        sim.agent(part.leader).publish_log_start_offset(topic, p, end.log_end_offset)
    wait_until(
        lambda: {x.partition for x in sim.controller.topic(topic).partitions} == {0, 1},
        30,
        what="partitions 2 and 3 removed",
    )
    assert set(sim.controller.group("g").offsets[topic]) == {0, 1}  # their commits went too

    with KeyedLoad(sim, topic) as load2:
        sim.cli("expand-partitions", topic, "--to", "8")
        _wait_runs(load2, 1)
        _consume_adversarially(sim, topic, "g", 4, load2)
    res = _verify(sim, topic, "g", load2)
    res["acked"] += load.runs * 400
    assert res["consumed"] >= res["acked"] > 0
    assert (res["lost"], res["order violations"]) == (0, 0), res
    # the re-created partitions were read from their new offset 0, after their first life's
    lives: dict[int, list[int]] = {}
    path = sim.data / "ledger" / "groups" / "g" / f"{topic}.delivered"
    for line in path.read_text().splitlines():
        _ident, p, offset = line.split("\t")
        lives.setdefault(int(p), []).append(int(offset))
    for p in (2, 3):
        restarts = [i for i, o in enumerate(lives[p]) if i and o < lives[p][i - 1]]
        assert len(restarts) == 1 and lives[p][restarts[0]] == 0, (p, restarts)
