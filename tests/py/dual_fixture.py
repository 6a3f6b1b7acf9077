"""The fixture that publishes two protocols at once (Elastic v1 and OTEP 4947's thread context: the
`with-elastic-v1` variant), held and journaled, for the agent tests that sample it."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from build_products import HOST_ARCH, fixture_dir, need
from fixture_process import read_journal
from json_otlp_receiver import JsonOtlpReceiver

FIXTURE = fixture_dir(HOST_ARCH) / "otel_thread_context" / "variants" / "with-elastic-v1" / "tracecorr-fixture"
THREADS = 2
WAIT_S = 20.0  # bound on waiting for the fixture's journal; a missed event fails, it never slows a pass


class DualFixture:
    """The variant under --hold: every worker's Elastic record and OTel thread context published, journaled."""

    def __init__(self, tmp_path):
        self.receiver = JsonOtlpReceiver()
        self.journal = tmp_path / "journal.jsonl"
        env = dict(os.environ)
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint, "TRACECORR_FIXTURE_JOURNAL": str(self.journal),
                    "TMPDIR": str(tmp_path)})
        self.proc = subprocess.Popen([str(need(FIXTURE)), "--hold", "--threads", str(THREADS)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + WAIT_S
        while len(self.last("otel_record")) < THREADS or not self.events("ready"):
            assert self.proc.poll() is None, f"fixture exited: {self.proc.stderr.read()}"
            assert not self.events("otel_error"), self.events("otel_error")
            if time.monotonic() > deadline:
                pytest.fail(f"the fixture journaled no OTel record of each worker within {WAIT_S} s: {self.events()}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self, kind: str | None = None) -> list[dict]:
        return read_journal(self.journal, kind)

    def last(self, kind: str) -> dict[int, dict]:
        """Each thread's last `kind` event: what it holds now."""
        return {ev["tid"]: ev for ev in self.events(kind)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.receiver.close()
