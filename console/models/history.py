"""History: samples of what the sync saw, for the trends an SRE asks for first in a disk or
tiering incident (how did this dir's usage and probe latency move; did remote bytes grow, did
copy lag build up).

Two resolutions of the same series (:class:`Resolution`): ``raw`` samples written by the sync
at most every ``STRATA_HISTORY_SAMPLE_SECONDS`` and kept 24 hours, and ``hour`` rows rolled up
from them (a peak per hour: the highest usage, the slowest probe, the worst state) and kept 30
days. Size is bounded by what is sampled, not by time: every log dir, and the topics that have
been tiered (a never-tiered topic has no remote bytes or lag to follow) when their figures
change or their keep-alive is due. See :mod:`console.history`.
"""

from __future__ import annotations

from django.db import models

from console.models.disks import LogDir
from console.models.topology import Topic

__all__ = ["LogDirSample", "Resolution", "TopicSample"]


class Resolution:
    RAW = "raw"
    HOUR = "hour"
    ALL = (RAW, HOUR)


class LogDirSample(models.Model):
    """One log dir at one time: usage, probe latency and KIP-112 state."""

    log_dir = models.ForeignKey(LogDir, on_delete=models.CASCADE, related_name="samples")
    resolution = models.CharField(max_length=8, default=Resolution.RAW)
    at = models.DateTimeField()
    used_bytes = models.BigIntegerField()
    total_bytes = models.BigIntegerField()
    probe_latency_ms = models.FloatField(null=True)
    state = models.CharField(max_length=16)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["log_dir", "resolution", "at"], name="logdirsample_unique_at"
            )
        ]
        # The roll-up and the retention delete read by time across all dirs.
        indexes = [models.Index(fields=["resolution", "at"], name="logdirsample_res_at")]

    def __str__(self) -> str:
        return f"{self.log_dir} at {self.at:%Y-%m-%d %H:%M:%S} ({self.resolution})"


class TopicSample(models.Model):
    """One topic at one time: its remote / local / fenced bytes and copy / delete lag (KIP-963)."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="samples")
    resolution = models.CharField(max_length=8, default=Resolution.RAW)
    at = models.DateTimeField()
    remote_bytes = models.BigIntegerField()
    local_bytes = models.BigIntegerField()
    fenced_remote_bytes = models.BigIntegerField()
    remote_copy_lag_bytes = models.BigIntegerField()
    remote_delete_lag_bytes = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["topic", "resolution", "at"], name="topicsample_unique_at"
            )
        ]
        indexes = [models.Index(fields=["resolution", "at"], name="topicsample_res_at")]

    def __str__(self) -> str:
        return f"{self.topic} at {self.at:%Y-%m-%d %H:%M:%S} ({self.resolution})"
