"""The replica fetcher survives a replica's log being taken away while a fetch is in flight (a
log dir failing, a reassignment): the fuzz saw ``AttributeError ... log_end_offset`` crash the
fetcher thread a dozen times on one broker (#16)."""

from __future__ import annotations

from broker_agent.simulator.broker.replication import Replication
from broker_agent.simulator.broker.state import BrokerCore, Replica
from broker_agent.simulator.storage import LogDir, PartitionLog


def _fetcher(replicas: dict) -> Replication:
    """Broker 2's replication part over ``replicas`` (no controller: nothing here sends)."""
    core = BrokerCore(2)
    core.replicas.update(replicas)
    return Replication(core, controller=None, secret=b"", replica_lag_time_max_ms=5000)


class _Client:
    """The leader; while it answers, another thread takes the follower's log away."""

    def __init__(self, take_away: Replica):
        self.take_away = take_away
        self.fetches: list[dict] = []

    def request(self, method: str, path: str, body: dict | None = None, **_: object) -> dict:
        self.take_away.log = None  # the log dir failed meanwhile
        if path.endswith("offsets-for-leader-epoch"):
            return {"end_offset": 0}
        self.fetches.append(body)
        return {
            "partitions": [
                {
                    "topic": p["topic"],
                    "partition": p["partition"],
                    "error": None,
                    "batches": [],
                    "high_watermark": 0,
                    "log_start_offset": 0,
                }
                for p in body["partitions"]
            ]
        }


def _replica(tmp_path, name: str) -> Replica:
    r = Replica(name, 0, "id-" + name)
    d = LogDir("logdir-0", str(tmp_path), on_failure=lambda *_: None)
    r.log = PartitionLog(d, name, 0, r.topic_id, segment_bytes=1 << 20)
    r.log.create()
    r.leader_epoch = 1
    return r


def test_the_answer_for_a_log_taken_away_during_the_fetch_is_dropped(tmp_path):
    kept, lost = _replica(tmp_path, "kept"), _replica(tmp_path, "lost")
    kept.needs_truncation = lost.needs_truncation = False
    client = _Client(lost)
    fetcher = _fetcher({("kept", 0): kept, ("lost", 0): lost})
    fetcher._fetch_round(client, [kept, lost])
    assert [p["topic"] for p in client.fetches[0]["partitions"]] == ["kept", "lost"]
    assert kept.log is not None and lost.log is None


def test_a_log_taken_away_during_the_truncation_check_is_skipped(tmp_path):
    lost = _replica(tmp_path, "lost")
    lost.log.leader_epochs = [(1, 0)]
    client = _Client(lost)
    _fetcher({("lost", 0): lost})._fetch_round(client, [lost])  # raised AttributeError before
    assert lost.log is None
