"""The plan review of the KIP-950 kinds (issue #15): what an approver reads before deciding,
from the plan's actions (approved) and information (moves with traffic, as of the last sync).
The delete policy's row is red and says how much becomes unreadable at once."""

from __future__ import annotations

from typing import Any

from broker_agent.contract.choices import DisablePolicy
from workflows.kinds import ReviewRow, size_text

__all__ = ["disable_review", "enable_review"]


def _brokers_text(actions: dict[str, Any]) -> str:
    per = actions.get("replicas_per_broker") or {}
    brokers = actions.get("brokers", [])
    if per:
        counts = {b: per.get(str(b), "?") for b in brokers}
        return "brokers " + ", ".join(
            f"{b} ({n} replica{'' if n == 1 else 's'})" for b, n in counts.items()
        )
    return "brokers " + ", ".join(str(b) for b in brokers)


def _remote_size(information: dict[str, Any]) -> str:
    return (
        f"{information.get('remote_segments', '?')} remote segments, "
        f"{size_text(information.get('remote_bytes'))} (as of the last sync)"
    )


def disable_review(actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
    topic, epoch, new = actions["topic"], actions["tiered_epoch"], actions["new_tiered_epoch"]
    where = f"topic {topic} ({actions['partitions']} partitions)"
    start = (
        ReviewRow(
            "Take over the disablement in progress (nothing drives it)",
            where,
            f"DISABLING, tiered epoch {new}, acknowledged by "
            f"{', '.join(map(str, information.get('acknowledged_by') or [])) or 'no broker'}",
            f"driven by this workflow, tiered epoch {new} (no new epoch)",
        )
        if actions.get("adopt")
        else ReviewRow(
            "Start disablement at the controller",
            where,
            f"{actions['tiered_state']}, tiered epoch {epoch}",
            f"DISABLING, tiered epoch {new}",
        )
    )
    rows = [
        start,
        ReviewRow(
            "DisableRemoteTopic (each broker acknowledges once)",
            _brokers_text(actions),
            "copying to the remote tier",
            "copying stopped",
        ),
        ReviewRow("Complete disablement", where, "DISABLING", f"DISABLED, tiered epoch {new}"),
    ]
    if actions["policy"] == DisablePolicy.DELETE:
        rows.append(
            ReviewRow(
                "Remote segments become unreadable at once, then the Spark purge deletes them",
                f"every remote segment of {topic} below tiered epoch {new}",
                "readable",
                "unreadable; log start offset moves to the local log start offset",
                _remote_size(information),
                destructive=True,
            )
        )
    else:
        growth = actions.get("disk_growth") or {}
        short = [
            f"broker {d['broker']} {d['log_dir']}"
            for d in growth.get("log_dirs", [])
            if not d.get("fits")
        ]
        rows.append(
            ReviewRow(
                "Remote data kept (policy retain)",
                f"topic {topic}",
                "readable",
                "readable; expires by the topic-wide retention",
                _remote_size(information),
            )
        )
        rows.append(
            ReviewRow(
                "Local segments kept until no remote data is left",
                "every hosting log dir",
                "",
                "projected growth fits every dir"
                if growth.get("all_fit", True)
                else "does NOT fit: " + ", ".join(short),
                destructive=not growth.get("all_fit", True),
            )
        )
    return rows


def enable_review(actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
    topic, epoch = actions["topic"], actions["tiered_epoch"]
    return [
        ReviewRow(
            "Enable tiering at the controller",
            f"topic {topic} ({actions['partitions']} partitions)",
            f"{actions['tiered_state']}, tiered epoch {epoch}",
            f"ENABLED, tiered epoch {epoch} (kept)",
        ),
        ReviewRow(
            "EnableRemoteTopic (each broker acknowledges once)",
            _brokers_text(actions),
            "not copying",
            "copying new segments",
        ),
        ReviewRow(
            "Verify: marker records, roll, the copier tiers the new segment",
            f"{topic} partition {information.get('verify_on_partition', '?')}",
            "",
            f"new segment at tiered epoch {epoch}, offsets without a gap",
        ),
        ReviewRow(
            "Retained remote data stays readable",
            f"topic {topic}",
            "",
            "",
            _remote_size(information),
        ),
    ]
