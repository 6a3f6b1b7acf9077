"""How long `tracecorr inspect` takes to find a target's socket among many
socket descriptors (issue 16: the socket is matched by inode through
sock_diag, one request per socket descriptor the target holds, instead of
comparing path strings in /proc/PID/net/unix).

  /usr/bin/python3 tests/bench/examine_socket_fds.py [BUILD] [N ...]

For each N, a Python process holds N socketpairs (2N socket fds) and then
binds its agent socket (the last fd, the worst case), publishes the process
storage through the unit-test agent library, and `tracecorr inspect
--no-threads --json` is run 5 times; the median wall time and the peak RSS
(/usr/bin/time) are printed. inspect examines the socket twice (facts, then
the reachability check), so each figure covers two scans.
"""
import ctypes
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "build"
COUNTS = [int(n) for n in sys.argv[2:]] or [0, 100, 1000, 5000]
CHILD = r'''
import ctypes, socket, struct, sys, time
lib = ctypes.CDLL(sys.argv[1]); n = int(sys.argv[2]); path = sys.argv[3]
keep = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(n)]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(path); s.setblocking(False)
u = lambda b: struct.pack("<I", len(b)) + b
buf = ctypes.create_string_buffer(struct.pack("<H", 1) + u(b"svc") + u(b"env") + u(path.encode()))
lib.tc_test_publish_storage(buf)
print("ready", flush=True)
time.sleep(600)
'''


def main():
    cli = BUILD / "bin" / "tracecorr"
    lib = BUILD / "testdata" / "elastic-jvmti-linux-unittest.so"
    print(f"{'socket fds':>10}  {'median s':>8}  {'peak RSS KB':>11}")
    for n in COUNTS:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "agent.sock")
            child = subprocess.Popen([sys.executable, "-c", CHILD, str(lib), str(n), path],
                                     stdout=subprocess.PIPE, text=True)
            try:
                assert child.stdout.readline().startswith("ready")
                times, rss = [], 0
                for _ in range(5):
                    start = time.monotonic()
                    r = subprocess.run(["/usr/bin/time", "-f", "%M", str(cli), "inspect", str(child.pid),
                                        "--no-threads", "--json"], capture_output=True, text=True, timeout=120)
                    times.append(time.monotonic() - start)
                    rss = max(rss, int(r.stderr.strip().splitlines()[-1]))
                    assert '"bound_by_target": true' in r.stdout, r.stdout
                print(f"{2 * n + 1:>10}  {statistics.median(times):>8.3f}  {rss:>11}")
            finally:
                child.kill()
                child.wait()


if __name__ == "__main__":
    main()
