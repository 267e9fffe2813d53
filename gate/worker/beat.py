"""The beat's scheduler: Celery's persistent one, writing a heartbeat on every tick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler

from gate.worker.heartbeat import beat, heartbeat_path

# Set on the app by `specgate worker`: the folder the heartbeat files go to.
HOME_KEY = "specgate_home"


class HeartbeatScheduler(PersistentScheduler):  # type: ignore[misc]  # celery is untyped
    """A persistent schedule whose every tick also proves the beat alive."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Write the beat's heartbeat, then send what is due."""
        beat(heartbeat_path(Path(self.app.conf[HOME_KEY]), "beat"))
        return float(super().tick(*args, **kwargs))
