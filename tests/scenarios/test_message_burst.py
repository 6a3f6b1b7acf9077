"""A burst of 10,000 correlation messages (ATTR-04).

The datagram queue of a unix socket is short (net.unix.max_dgram_qlen), so a
burst loses messages to EAGAIN at the sender; a profiler that does not block
simply drops them. Whatever the kernel accepted must be counted, and nothing
else: the attribute carries the id exactly as often as it was sent.
"""
import pytest

from scenario_support import active_transaction, b64, exported_ids, stack_id

from tracecorr import SendOutcome

BURST = 10_000


@pytest.mark.requirement("ATTR-04")
def test_burst_of_correlations(tracecorr_target, host_agent, otlp_receiver):
    assert host_agent.register(delay_ms=3000) == SendOutcome.SENT
    trace_id, transaction_id = active_transaction(tracecorr_target)
    stack = stack_id(10)
    for _ in range(BURST):
        host_agent.send_correlation(trace_id, transaction_id, stack, 1)
    sent = host_agent.outcomes[SendOutcome.SENT] - 1  # minus the registration
    lost = host_agent.outcomes[SendOutcome.WOULD_BLOCK]
    print(f"burst of {BURST}: {sent} sent, {lost} lost to EAGAIN, "
          f"{host_agent.outcomes[SendOutcome.REFUSED]} refused")
    assert sent + lost == BURST, f"unexpected send outcomes: {dict(host_agent.outcomes)}"
    assert sent > 0

    assert exported_ids(otlp_receiver, trace_id, transaction_id).count(b64(stack)) == sent
