"""Traffic for the simulated cluster: ``sim produce`` / ``sim consume`` with a ledger of what
was acknowledged (so ``--verify`` can say what was lost), and ``sim demo-load``, the live
produce load ``make run`` keeps on its demo topics."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import uuid

from broker_agent.contract.choices import TopicConfig
from broker_agent.simulator.processes import (
    controller_client,
    data_secret,
    ensure_secret,
    setup_logging,
    spawn,
    stop_process,
)

__all__ = [
    "DEMO_TOPICS",
    "cmd_consume",
    "cmd_demo_load",
    "cmd_demo_worker",
    "cmd_produce",
    "verify_group",
    "verify_topic",
]


DEMO_TOPICS = [
    (
        "demo.orders",
        6,
        3,
        # small segments and local retention: under the gentle demo load (~1 record/s, ~60 bytes
        # each, per partition) a segment closes in about 30 s, so the first objects reach the
        # remote store within a minute of `make run` and Rx..Ry / Lx..end show at once
        {
            TopicConfig.REMOTE_STORAGE_ENABLE: "true",
            TopicConfig.SEGMENT_BYTES: "2048",
            TopicConfig.LOCAL_RETENTION_BYTES: "8192",
        },
    ),
    (
        "demo.payments",
        3,
        3,
        {TopicConfig.REMOTE_STORAGE_ENABLE: "true", TopicConfig.SEGMENT_BYTES: "4096"},
    ),
    (
        "demo.clicks",
        3,
        2,
        {TopicConfig.RETENTION_BYTES: "2097152", TopicConfig.SEGMENT_BYTES: "65536"},
    ),
]


def _ledger(data: str, topic: str) -> str:
    d = os.path.join(data, "ledger")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{topic}.acked")


def _read_acked(data: str, topic: str) -> list[tuple[str, str | None, int | None]]:
    """The ack ledger: ``ident`` per unkeyed record, ``ident\tkey\tseq`` per keyed one, in the
    order they were acknowledged (``seq`` counts a key's records: its per-key sequence)."""
    out = []
    try:
        with open(_ledger(data, topic)) as fh:
            for line in fh:
                cols = line.rstrip("\n").split("\t")
                if not cols[0]:
                    continue
                if len(cols) == 3:
                    out.append((cols[0], cols[1], int(cols[2])))
                else:
                    out.append((cols[0], None, None))
    except FileNotFoundError:
        pass
    return out


def cmd_produce(args) -> int:
    """``--keyed``: keys ``key-0`` .. ``key-999`` in turn, each record's per-key sequence in the
    ledger, so ``sim consume --group G --verify`` can check order per key."""
    from broker_agent.contract.producer import Producer

    data = os.path.abspath(args.data)
    ctl = controller_client(data)
    producer = Producer(ctl, data_secret(data))
    run = uuid.uuid4().hex[:8]
    acked = 0
    started = time.monotonic()
    pad = "x" * max(0, args.value_size - 20)
    seqs: dict[str, int] = {}
    if args.keyed:
        for _ident, key, seq in _read_acked(data, args.topic):
            if key is not None:
                seqs[key] = max(seqs.get(key, -1), seq)
    with open(_ledger(data, args.topic), "a") as ledger:
        for start in range(0, args.records, args.batch_size):
            n = min(args.batch_size, args.records - start)
            records = [
                {
                    "key": f"key-{(start + i) % 1000}" if args.keyed else None,
                    "value": f"{run}-{start + i}|{pad}",
                }
                for i in range(n)
            ]
            producer.send(args.topic, records)
            lines = []
            for r in records:
                ident = r["value"].split("|")[0]
                if r["key"] is None:
                    lines.append(ident + "\n")
                else:
                    seqs[r["key"]] = seqs.get(r["key"], -1) + 1
                    lines.append(f"{ident}\t{r['key']}\t{seqs[r['key']]}\n")
            ledger.write("".join(lines))
            ledger.flush()
            acked += n
    elapsed = time.monotonic() - started
    producer.close()
    print(
        json.dumps(
            {
                "acked": acked,
                "seconds": round(elapsed, 3),
                "records_per_second": round(acked / elapsed, 1) if elapsed else None,
            }
        )
    )
    return 0


def verify_topic(data: str, topic: str) -> dict:
    from broker_agent.contract.producer import Consumer

    ctl = controller_client(data)
    consumer = Consumer(ctl, data_secret(data))
    seen: dict[str, int] = {}
    total = 0
    for records in consumer.read_topic(topic).values():
        for rec in records:
            ident = rec.value.split("|")[0]
            seen[ident] = seen.get(ident, 0) + 1
            total += 1
    consumer.close()
    acked = {ident for ident, _key, _seq in _read_acked(data, topic)}
    return {
        "consumed": total,
        "acked": len(acked),
        "lost": sum(1 for a in acked if a not in seen),
        "duplicated": sum(n - 1 for n in seen.values() if n > 1),
    }


def _delivery_ledger(data: str, group: str, topic: str) -> str:
    d = os.path.join(data, "ledger", "groups", group)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{topic}.delivered")


def verify_group(data: str, group: str, topic: str) -> dict:
    """What ``group`` delivered of ``topic`` (its delivery ledger, in delivery order) against
    what was acknowledged: lost, duplicated, and order violations - a keyed record delivered
    after a later record of the same key (per-key sequence going back)."""
    acked = _read_acked(data, topic)
    seq_of = {ident: (key, seq) for ident, key, seq in acked if key is not None}
    seen: dict[str, int] = {}
    last: dict[str, int] = {}
    violations = 0
    try:
        with open(_delivery_ledger(data, group, topic)) as fh:
            delivered = [line.split("\t")[0] for line in fh if line.strip()]
    except FileNotFoundError:
        delivered = []
    for ident in delivered:
        seen[ident] = seen.get(ident, 0) + 1
        if seen[ident] > 1 or ident not in seq_of:
            continue
        key, seq = seq_of[ident]
        if seq < last.get(key, -1):
            violations += 1
        else:
            last[key] = seq
    return {
        "consumed": len(delivered),
        "acked": len(acked),
        "lost": sum(1 for ident, _k, _s in acked if ident not in seen),
        "duplicated": sum(n - 1 for n in seen.values() if n > 1),
        "order_violations": violations,
    }


def _consume_group(args, data: str) -> int:
    """``sim consume --topic T --group G``: resume from the group's committed positions, deliver
    what KIP-253's gates allow (``broker_agent.simulator.group_consumer``), append each batch to the
    group's delivery ledger before committing it. ``--verify`` then checks the ledger."""
    from broker_agent.simulator.group_consumer import GroupConsumer

    ledger = open(_delivery_ledger(data, args.group, args.topic), "a")  # noqa: SIM115

    def sink(batch) -> None:
        ledger.write(
            "".join(f"{r.value.split('|')[0]}\t{r.partition}\t{r.offset}\n" for r in batch)
        )
        ledger.flush()
        if not args.verify:
            for r in batch:
                print(
                    json.dumps(
                        {
                            "partition": r.partition,
                            "offset": r.offset,
                            "key": r.key,
                            "value": r.value,
                        }
                    )
                )

    consumer = GroupConsumer(
        controller_client(data), data_secret(data), args.group, [args.topic], sink=sink
    )
    try:
        consumer.run(args.max_records)
        for topic, gates in sorted(consumer.gates.items()):
            for p, g in sorted(gates.items()):
                print(f"held: {topic}-{p} {g.reason}", file=sys.stderr)
    finally:
        consumer.leave()
        ledger.close()
    if not args.verify:
        return 0
    res = verify_group(data, args.group, args.topic)
    print(f"consumed: {res['consumed']}")
    print(f"lost: {res['lost']}")
    print(f"duplicated: {res['duplicated']}")
    print(f"order violations: {res['order_violations']}")
    bad = res["lost"] or res["duplicated"] or res["order_violations"]
    return 1 if bad else 0


def cmd_consume(args) -> int:
    data = os.path.abspath(args.data)
    if args.group:
        return _consume_group(args, data)
    if args.max_records is not None:
        raise SystemExit("error: --max-records needs --group (positions are kept per group)")
    if not args.verify:
        from broker_agent.contract.producer import Consumer

        consumer = Consumer(controller_client(data), data_secret(data))
        for p, recs in consumer.read_topic(args.topic).items():
            for r in recs:
                print(
                    json.dumps({"partition": p, "offset": r.offset, "key": r.key, "value": r.value})
                )
        return 0
    res = verify_topic(data, args.topic)
    print(f"consumed: {res['consumed']}")
    print(f"lost: {res['lost']}")
    print(f"duplicated: {res['duplicated']}")
    return 0 if res["lost"] == 0 and res["duplicated"] == 0 else 1


def cmd_demo_load(args) -> int:
    from broker_agent.contract.client import AgentError

    data = os.path.abspath(args.data)
    ctl = controller_client(data)
    existing = {t.name for t in ctl.topics()}
    live = sum(1 for b in ctl.metadata().brokers if b.alive)
    for name, parts, rf, configs in DEMO_TOPICS:
        if name not in existing:
            with contextlib.suppress(AgentError):
                ctl.create_topic(name, parts, min(rf, live), configs)
    if args.detach:
        stop_process(data, "demo-load")
        spawn(
            data,
            "demo-load",
            [
                "demo-load-worker",
                "--data",
                data,
                "--rate",
                str(args.rate),
                "--duration",
                str(args.duration),
            ],
            ensure_secret(data),
        )
        print(
            json.dumps(
                {"topics": [t[0] for t in DEMO_TOPICS], "load": "detached", "rate": args.rate}
            )
        )
        return 0
    print(
        json.dumps({"topics": [t[0] for t in DEMO_TOPICS], "load": "foreground", "rate": args.rate})
    )
    return _demo_worker(data, args.rate, args.duration)


def _demo_worker(data: str, rate: float, duration: float) -> int:
    from broker_agent.contract.producer import Producer

    setup_logging()
    ctl = controller_client(data)
    producer = None
    started = time.monotonic()
    i = 0
    while duration <= 0 or time.monotonic() - started < duration:
        tick = time.monotonic()
        try:
            producer = producer or Producer(ctl, data_secret(data), timeout=10)
            for name, *_ in DEMO_TOPICS:
                n = max(1, int(rate / len(DEMO_TOPICS)))
                producer.send(
                    name,
                    [{"key": f"user-{(i + j) % 97}", "value": f"demo-{i + j}"} for j in range(n)],
                )
                i += n
        except Exception as exc:  # keep the gentle load going through broker restarts
            logging.getLogger("demo-load").info("produce failed: %s", exc)
            producer = None
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    return 0


def cmd_demo_worker(args) -> int:
    return _demo_worker(os.path.abspath(args.data), args.rate, args.duration)
