"""An SDK updates its resource while a reader reads (OTEP 4719, PCTX-10).

The reference writer publishes its process context and updates it every 20 ms
(each update bumps `tracecorr.fixture.update_count`), while a reader outside
the process reads it the way a profiler does: by name in /proc/PID/maps, then
the timestamp seqlock. Every consistent read must decode, each timestamp must
name exactly one payload, and across updates the timestamps must increase with
the counter: a reader never sees a half-updated resource.
"""
import pytest

import tracecorr
from build_products import HOST_ARCH, need, package_fixture_program
from tracecorr.otel_process_context import ContextReader, attributes

WRITER = package_fixture_program("otel_process_context", "otel-ctx-writer", HOST_ARCH)
COUNTER = "tracecorr.fixture.update_count"


@pytest.mark.requirement("PCTX-10")
def test_reader_sees_every_update_whole():
    command = [str(need(WRITER)), "--service-name", "scenario-sdk", "--update-ms", "20"]
    with tracecorr.Target(command, protocol="otel-process-context") as target:
        target.wait_ready()
        with ContextReader(target) as reader:
            publications = reader.read_for(1.0)
    assert not reader.torn, f"{len(reader.torn)} reads under a timestamp returned another payload: {reader.torn[0]}"
    assert len(publications) >= 5, f"only {len(publications)} publications seen in 1 s of updates every 20 ms"
    timestamps = [p["header"]["monotonic_published_at_ns"] for p in publications]
    counters = [attributes({"mappings": [p]})[COUNTER] for p in publications]
    # Every publication decoded, with the SDK's resource intact.
    for p in publications:
        resource = {a["key"]: a["value"] for a in p["payload"]["resource"]}
        assert resource.get("service.name") == "scenario-sdk", p
    # Later timestamps carry later resources: the seqlock never handed over a mix.
    assert counters == sorted(counters) and len(set(counters)) == len(counters), list(zip(timestamps, counters))
