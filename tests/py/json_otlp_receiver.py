"""A minimal OTLP/HTTP JSON receiver written in Python, independent of
tracecorr's own (C++) receiver: the fixture and end-to-end tests use it as an
oracle that shares no code with what they test."""
import http.server
import json
import threading
import time


class JsonOtlpReceiver:
    """Keeps (receive unix ns, resource attributes, span) for every exported span."""

    def __init__(self):
        self.received = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                now = time.time_ns()
                with receiver.lock:
                    for rs in body.get("resourceSpans", []):
                        resource = {a["key"]: a["value"] for a in rs.get("resource", {}).get("attributes", [])}
                        for ss in rs.get("scopeSpans", []):
                            for span in ss.get("spans", []):
                                receiver.received.append((now, resource, span))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def snapshot(self):
        """[(receive unix ns, resource attributes, span)] received so far."""
        with self.lock:
            return list(self.received)

    @property
    def spans(self):
        """The spans received so far, in arrival order."""
        return [span for _, _, span in self.snapshot()]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
