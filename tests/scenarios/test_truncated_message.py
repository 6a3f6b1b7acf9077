"""A truncated correlation message between two valid ones (MSG-04).

The middle message lacks the last byte of its count field: the agent must
discard it, and neither it nor the loss of it may disturb the valid messages
around it.
"""
import collections

import pytest

from scenario_support import active_transaction, b64, exported_ids, stack_id

from tracecorr import SendOutcome
from tracecorr.elastic_v1 import messages


@pytest.mark.requirement("MSG-04")
def test_truncated_between_valid(tracecorr_target, host_agent, otlp_receiver):
    assert host_agent.register(delay_ms=2000) == SendOutcome.SENT
    trace_id, transaction_id = active_transaction(tracecorr_target)
    before, truncated, after = stack_id(41), stack_id(42), stack_id(43)

    whole = messages.correlation(trace_id, transaction_id, truncated, count=1)
    cut = messages.truncate(whole, messages.minimum_size(whole) - 1)
    with pytest.raises(Exception):
        messages.decode(cut)  # the C++ decoder rejects it too (MSG-04)

    assert host_agent.send_correlation(trace_id, transaction_id, before, 1) == SendOutcome.SENT
    assert host_agent.send_raw(cut) == SendOutcome.SENT
    assert host_agent.send_correlation(trace_id, transaction_id, after, 1) == SendOutcome.SENT

    got = collections.Counter(exported_ids(otlp_receiver, trace_id, transaction_id))
    assert got[b64(truncated)] == 0, "the truncated message was counted"
    assert got[b64(before)] == 1 and got[b64(after)] == 1, f"valid messages around it were disturbed: {dict(got)}"
