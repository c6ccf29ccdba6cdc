"""The stand-in's HTTP surface: the SGLang endpoints the deployment reads, stdlib only."""

import hmac
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# SGLang 0.5.23 (sglang/srt/utils/auth.py, decide_request_auth): probes and metrics are open by
# prefix; every other endpoint the stand-in serves is NORMAL (api-key when one is set).
OPEN_PREFIXES = ("/health", "/ready", "/metrics")


class Handler(BaseHTTPRequestHandler):
    engine = None  # set by serve()
    http = None  # SGLang's HTTP metrics (metrics.HttpMetrics), with --enable-metrics
    protocol_version = "HTTP/1.1"
    _status = None
    _counting = None  # (endpoint, method, routing key) of the request SGLang's metrics count

    def send_response(self, code, message=None):
        self._status = code if self._status is None else self._status
        super().send_response(code, message)

    def _counted(self, path, serve):
        """`serve()` counted in SGLang's HTTP metrics as its middleware counts it (a request
        the API key refused never reaches it: called once authorized)."""
        if self.http is None:
            serve()
            return
        self._status, self._counting = None, (path, self.command,
                                              self.headers.get("x-smg-routing-key"))
        self.http.begin(*self._counting)
        try:
            serve()
            self._finished(answered=True)
        finally:
            self._finished(answered=False)  # the handler raised: no answer counted

    def _finished(self, answered):
        """The answer counted (with its status) and the request no longer active, once. SGLang's
        middleware does both as the app has sent its last bytes, before its event loop serves
        another request; called just before those bytes go out (_send, a stream's [DONE]), so
        that a client that asks /metrics right after its answer sees it counted, as SGLang's."""
        if self._counting is None:
            return
        counting, self._counting = self._counting, None
        if answered and self._status is not None:
            self.http.answered(counting[0], counting[1], self._status)
        self.http.end(*counting)

    def log_message(self, fmt, *args):  # keep the journal readable: one line per request
        sys.stderr.write("standin: %s\n" % (fmt % args))

    # ---- plumbing -------------------------------------------------------------------------
    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self._finished(answered=True)  # the headers end an empty answer
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status, obj):
        self._send(status, json.dumps(obj))

    def _authorized(self, path):
        key = self.engine.api_key
        if not key or path.startswith(OPEN_PREFIXES):
            return True
        if hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {key}"):
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return None

    # ---- routes ---------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 - http.server naming
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return
        self._counted(path, lambda: self._get(path))

    def _get(self, path):
        engine = self.engine
        if path in ("/health", "/health_generate"):
            # SGLang answers 503 once SIGTERM started its drain (tokenizer_manager.gracefully_exit).
            self._send(503 if engine.draining else 200, b"")
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, engine.model_info())
        elif path in ("/server_info", "/get_server_info"):
            self._json(200, engine.server_info())
        elif path == "/v1/models":
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": engine.served_model_name,
                            "object": "model",
                            "created": int(engine.started),
                            "owned_by": "sglang",
                            "root": str(engine.args["model-path"]),
                        }
                    ],
                },
            )
        elif path == "/metrics":
            self._send(200, engine.metrics(), "text/plain; version=0.0.4")
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802 - http.server naming
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return
        self._counted(path, lambda: self._post(path))

    def _post(self, path):
        if path == "/standin/knobs":
            try:
                self._json(200, self.engine.set_knobs(self._body()))
            except ValueError as exc:
                self._json(400, {"error": {"message": str(exc)}})
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"detail": "Not Found"})
            return
        body = self._body()
        if not isinstance(body, dict):
            self._json(400, {"error": {"message": "request body is not a JSON object"}})
            return
        with self.engine.running_request():
            self._generate(body, chat=path.endswith("chat/completions"))

    def _generate(self, body, chat):
        engine = self.engine
        if engine.knobs.broken_scheduler:
            # /health still answers 200, as SGLang's can while its scheduler is dead (sglang#6624).
            self._json(503, {"error": {"message": "scheduler is not responding"}})
            return
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
        else:
            prompt = str(body.get("prompt", ""))
        prompt_tokens = max(1, len(prompt.split()))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        alive, cached = engine.admit(prompt_tokens, prompt)
        if not alive:
            sys.stderr.write("standin: crash knob reached, exiting\n")
            sys.stderr.flush()
            os._exit(1)
        start = time.monotonic()
        prefill_s = engine.prefill_s(prompt_tokens, cached)
        accept = engine.accept_length_of(prompt)
        rid = uuid.uuid4().hex
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens,
            "total_tokens": prompt_tokens + max_tokens,
        }
        kind = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            last_at = max(at for at, _ in engine.schedule(max_tokens, prefill_s))
            _sleep_until(start + last_at)
            # A request that does not stream reaches SGLang's tokenizer once, finished: its
            # first token is timed then, no inter-token gap is (collect_metrics).
            ttft = engine.knobs.ttft_ms / 1000.0 + prefill_s
            engine.first_token(ttft, stream=False)
            engine.finished(prompt_tokens, max_tokens, cached, time.monotonic() - start, ttft,
                            False, accept)
            text = "tok " * max_tokens
            choice = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            self._json(
                200,
                {
                    "id": rid,
                    "object": kind,
                    "created": int(time.time()),
                    "model": engine.served_model_name,
                    "choices": [choice],
                    "usage": usage,
                },
            )
            return

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        want_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        first_at = last_at = None
        for at, n in engine.schedule(max_tokens, prefill_s):
            _sleep_until(start + at)
            now = time.monotonic()
            if first_at is None:
                first_at = now - start
                engine.first_token(first_at, stream=True)
            else:
                engine.streamed(now - last_at, n)
            last_at = now
            text = "tok " * n
            delta = {"content": text} if chat else None
            choice = {"index": 0, "finish_reason": None}
            if chat:
                choice["delta"] = delta
            else:
                choice["text"] = text
            chunk = {"id": rid, "object": kind + ".chunk", "model": engine.served_model_name,
                     "choices": [choice]}
            self._event(chunk)
        final = {"index": 0, "finish_reason": "length"}
        final["delta" if chat else "text"] = {} if chat else ""
        self._event({"id": rid, "object": kind + ".chunk", "model": engine.served_model_name,
                     "choices": [final]})
        if want_usage:
            self._event({"id": rid, "object": kind + ".chunk", "model": engine.served_model_name,
                         "choices": [], "usage": usage})
        self._finished(answered=True)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        engine.finished(prompt_tokens, max_tokens, cached, time.monotonic() - start,
                        first_at or 0.0, True, accept)
        sys.stderr.write(engine.decode_batch_line() + "\n")

    def _event(self, obj):
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def _sleep_until(deadline):
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def announce(engine):
    """Log what real SGLang logs at start, for what the stand-in reports as resolved."""
    info = engine.server_info()
    # SGLang 0.5.23 logs the resolved arguments, API keys included
    # (sglang/srt/entrypoints/engine.py: logger.info(f"server_args=...")); so does the stand-in,
    # so that a deployment that lets them reach the journal is caught.
    sys.stderr.write(f"standin: server_args={engine.resolved_args()!r}\n")
    legacy = "cuda_graph_config" not in info
    decode_on = (not info.get("disable_cuda_graph")) if legacy else (
        info["cuda_graph_config"]["decode"]["backend"] != "disabled")
    prefill_on = (not info.get("disable_piecewise_cuda_graph", True)) if legacy else (
        info["cuda_graph_config"]["prefill"]["backend"] != "disabled")
    if decode_on:
        sys.stderr.write("standin: Capture cuda graph begin. This can take up to several minutes.\n"
                         if legacy else "standin: Capture target decode CUDA graph begin.\n")
    if prefill_on:
        sys.stderr.write("standin: Capture piecewise CUDA graph begin.\n" if legacy
                         else "standin: Capture target prefill CUDA graph begin.\n")


def drain_on_sigterm(engine, httpd):
    """As SGLang 0.5.23 does on SIGTERM (sglang/srt/managers/tokenizer_manager.py,
    sigterm_handler and sigterm_watchdog): /health answers 503, requests keep being served
    (new ones too: SGLang does not refuse them), and the server exits once none runs."""
    def watchdog():
        last = None
        while True:
            with engine.lock:
                running = engine.running
            if running == 0:
                break
            if running != last:
                sys.stderr.write(f"standin: Gracefully exiting... Remaining number of requests "
                                 f"{running}.\n")
                sys.stderr.flush()
                last = running
            time.sleep(0.1)
        sys.stderr.write("standin: drained, exiting\n")
        sys.stderr.flush()
        httpd.shutdown()

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        if not engine.draining:
            engine.draining = True
            threading.Thread(target=watchdog, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)


def serve(engine):
    announce(engine)
    host = str(engine.args.get("host", "127.0.0.1"))
    port = int(engine.args.get("port", 30000))
    Handler.engine = engine
    # SGLang records its HTTP metrics only with --enable-metrics (http_server.py, lifespan).
    Handler.http = engine.collectors.http if engine.server_info().get("enable_metrics") else None
    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    drain_on_sigterm(engine, httpd)
    sys.stderr.write(f"standin: serving {engine.served_model_name} on http://{host}:{port}\n")
    sys.stderr.flush()
    httpd.serve_forever()
    # A request accepted as the drain ended: no new one comes now, let it finish (systemd's
    # TimeoutStopSec bounds this, as it bounds SGLang's own drain).
    while engine.running:
        time.sleep(0.05)
