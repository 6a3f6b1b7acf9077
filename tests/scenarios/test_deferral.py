"""A transaction ends before its samples arrive (DEFER-01).

A profiler reports samples in batches, so correlations routinely arrive after
the transaction ended. The agent defers ended transactions: a correlation sent
after the transaction is seen to end must still make it into the exported
attribute.
"""
import time

import pytest

from scenario_support import active_transaction, b64, exported_ids, stack_id, wait_until_ended

from tracecorr import SendOutcome


@pytest.mark.requirement("DEFER-01")
def test_late_samples_are_covered_by_deferral(tracecorr_target, host_agent, otlp_receiver):
    assert host_agent.register(delay_ms=2000) == SendOutcome.SENT
    trace_id, transaction_id = active_transaction(tracecorr_target)
    wait_until_ended(tracecorr_target, transaction_id)

    stack = stack_id(1)
    sent_at_ns = time.time_ns()
    assert host_agent.send_correlation(trace_id, transaction_id, stack, count=3) == SendOutcome.SENT

    assert exported_ids(otlp_receiver, trace_id, transaction_id).count(b64(stack)) == 3
    span = otlp_receiver.find(trace_id, transaction_id)
    assert span.end_unix_nano < sent_at_ns, "precondition: the transaction had ended before the message was sent"
