"""The on-disk spool: ordered, bounded, durable across restarts, corrupt segments set aside."""

from __future__ import annotations

import subprocess
import sys

from collectors import spool as spool_io
from collectors.spool import Spool
from tests.collectors.factory import Ids, gateway_spans

IDS = Ids(rollout=1, baseline_route=1, candidate_route=2)


def test_segments_replay_in_order_and_survive_a_restart(tmp_path):
    first, second = gateway_spans(IDS), gateway_spans(IDS)
    spool = Spool(tmp_path, max_bytes=1 << 20)
    assert spool.append(first) and spool.append(second)
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    assert reopened.segments == 2 and reopened.bytes == spool.bytes
    oldest = reopened.oldest()
    assert spool_io.read(oldest) == first
    reopened.remove(oldest)
    assert spool_io.read(reopened.oldest()) == second
    assert (
        reopened.append(first) and reopened.oldest().path.name < sorted(tmp_path.iterdir())[-1].name
    )


def test_the_spool_refuses_what_does_not_fit(tmp_path):
    spool = Spool(tmp_path, max_bytes=len(spool_io.encode(gateway_spans(IDS))) + 10)
    assert spool.append(gateway_spans(IDS))
    assert not spool.append(gateway_spans(IDS))
    assert spool.segments == 1


def test_a_corrupt_segment_is_quarantined(tmp_path):
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(gateway_spans(IDS))
    segment = spool.oldest()
    segment.path.write_bytes(b'{"format": 1, "rows": [[1]]')
    try:
        spool_io.read(segment)
    except ValueError as exc:
        assert "corrupt spool segment" in str(exc)
    else:
        raise AssertionError("a corrupt segment was read")
    spool.quarantine(segment)
    assert spool.segments == 0 and spool.bytes == 0 and list(tmp_path.glob("*.bad"))


def test_writers_sharing_a_spool_folder_each_claim_their_own(tmp_path):
    first = Spool.claim(tmp_path, max_bytes=1 << 20)
    second = Spool.claim(tmp_path, max_bytes=1 << 20)
    assert (first.folder, second.folder) == (tmp_path, tmp_path / "writer-1")
    spans = gateway_spans(IDS)
    assert second.append(spans)
    # Another process cannot take a held folder either (flock is per open file).
    probe = (
        "import sys; from pathlib import Path; from collectors.spool import Spool; "
        "print(Spool.claim(Path(sys.argv[1]), max_bytes=1).folder.name)"
    )
    other = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == "writer-2"
    # A writer that stops lets the next one claim its folder and replay what it left.
    second.release()
    again = Spool.claim(tmp_path, max_bytes=1 << 20)
    assert again.folder == tmp_path / "writer-1" and again.segments == 1
    # With fewer writers than before, the first to start takes the orphaned segments in.
    again.release()
    first.release()
    alone = Spool.claim(tmp_path, max_bytes=1 << 20)
    assert alone.folder == tmp_path and alone.segments == 1
    assert not list((tmp_path / "writer-1").glob("*.spool"))
    assert spool_io.read(alone.oldest()) == spans
    alone.release()
