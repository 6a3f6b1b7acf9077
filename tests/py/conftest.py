"""Session-wide reporting for the conform tests (conform_support.KILL_MATRIX):
the kill matrix and timings are printed in the terminal summary, so they show
with -q as well as with -s."""
import conform_support


def pytest_terminal_summary(terminalreporter):
    lines = conform_support.KILL_MATRIX.render()
    if not lines:
        return
    terminalreporter.write_sep("=", "tracecorr conform kill matrix")
    for line in lines:
        terminalreporter.write_line(line)
