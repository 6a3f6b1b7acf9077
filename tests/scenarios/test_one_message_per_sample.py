"""A host agent that sends one message per sample, like the OTel eBPF profiler (ATTR-04).

libtracecorr's reference host agent samples the target for two seconds with
the ``ebpf-profiler`` personality: no registration, one correlation message
(count 1) per sample. Whatever it says it sent for a transaction must appear in
that transaction's attribute exactly as often: the agent adds up per-sample
messages the same way it adds up counts.
"""
import collections

import pytest

from scenario_support import WAIT_S

import tracecorr


@pytest.mark.requirement("ATTR-04")
def test_one_message_per_sample_counts(tracecorr_target, host_agent, otlp_receiver, tracecorr_reader):
    summary = host_agent.sample(2.0, reader=tracecorr_reader, personality="ebpf-profiler")
    assert summary["personality"] == "ebpf-profiler"
    assert summary["totals"]["registrations_sent"] == 0, "the ebpf-profiler personality does not register"
    sent = {}
    for process in summary["processes"]:
        assert process["pid"] == tracecorr_target.pid
        for t in process["transactions"]:
            if t["samples_sent"]:
                sent[(t["trace_id"], t["transaction_id"])] = collections.Counter(t["stack_trace_ids"])
    assert sent, f"the host agent sent nothing ({summary['totals']})"
    # One message per sample: as many messages as samples.
    assert summary["totals"]["messages_sent"] == summary["totals"]["samples_sent"]

    wanted = {(bytes.fromhex(t), bytes.fromhex(x)) for t, x in sent}
    arrived = otlp_receiver.wait_for(
        lambda spans: wanted <= {(s.trace_id, s.span_id) for s in spans}, WAIT_S)
    assert arrived, "not every correlated transaction was exported"
    name = tracecorr.elastic_v1.attribute_name()
    for (trace_id, transaction_id), expected in sent.items():
        span = otlp_receiver.find(trace_id, transaction_id)
        got = collections.Counter(span.attribute(name) or [])
        assert got == expected, f"transaction {transaction_id}: attribute {dict(got)} != sent {dict(expected)}"
