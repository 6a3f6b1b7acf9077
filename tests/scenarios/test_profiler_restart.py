"""The profiler restarts and registers again (MSG-03).

A profiler registers, goes away, and a new profiler connects and registers with
another samples-delay-ms and host-id. The agent must take the second
registration: correlations on the new connection still land on the
transaction, and (for an agent without a host.id of its own, HOST-01) its spans
now carry the new host.id.
"""
import pytest

from tracecorr import SendOutcome

from scenario_support import WAIT_S, active_transaction, b64, exported_ids, stack_id

HOST_A = "tracecorr-py-host-a"
HOST_B = "tracecorr-py-host-b"


@pytest.mark.requirement("MSG-03")
def test_profiler_restart_reregisters(tracecorr_target, host_agent, otlp_receiver):
    # What host.id did the agent export before any registration? (None: it has none of its own.)
    assert otlp_receiver.wait_for(lambda spans: len(spans) > 0, WAIT_S), "the agent exported no spans"
    own_host_id = otlp_receiver.spans()[0].resource_attribute("host.id")

    assert host_agent.register(delay_ms=300, host_id=HOST_A) == SendOutcome.SENT
    # Does this agent adopt a registration's host.id at all (HOST-01)? Only then can the
    # restart be seen in the host.id; otherwise the correlation below is the evidence.
    adopts = own_host_id is None and otlp_receiver.wait_for(
        lambda spans: any(s.resource_attribute("host.id") == HOST_A for s in spans), WAIT_S)

    # The profiler restarts: its connection goes away and a new one registers.
    host_agent.reconnect()
    assert host_agent.register(delay_ms=1500, host_id=HOST_B) == SendOutcome.SENT

    trace_id, transaction_id = active_transaction(tracecorr_target)
    stack = stack_id(3)
    assert host_agent.send_correlation(trace_id, transaction_id, stack, count=2) == SendOutcome.SENT
    assert exported_ids(otlp_receiver, trace_id, transaction_id).count(b64(stack)) == 2

    if adopts:
        assert otlp_receiver.wait_for(
            lambda spans: any(s.resource_attribute("host.id") == HOST_B for s in spans), WAIT_S), \
            f"spans kept host.id {HOST_A}: the second registration was not applied"
    elif own_host_id is not None:
        # HOST-02: an agent with its own host.id keeps it, across registrations.
        assert otlp_receiver.spans()[-1].resource_attribute("host.id") == own_host_id
    else:
        print("the agent never exported a registration's host.id (HOST-01); judged on correlation only")
