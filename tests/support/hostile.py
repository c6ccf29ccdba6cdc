"""A raw TCP server that answers HTTP the way a broken or hostile server would."""

import contextlib
import socket
import threading
import time


@contextlib.contextmanager
def serve(answer):
    """Run `answer(conn, request_bytes)` for every connection; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def handle(conn):
        with conn:
            conn.settimeout(30)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    data += piece
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                answer(conn, head + b"\r\n\r\n" + rest, stop)
            except OSError:
                pass

    def accept():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        sock.close()


def reply(status=200, body=b"", headers=(), reason=b"OK"):
    """An answer function sending one complete response."""
    def answer(conn, _request, _stop):
        head = [b"HTTP/1.1 %d %s" % (status, reason), b"Content-Length: %d" % len(body),
                b"Connection: close", *headers]
        conn.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
    return answer


def raw(data):
    """An answer function sending bytes as they are (bad status lines, short bodies)."""
    def answer(conn, _request, _stop):
        conn.sendall(data)
    return answer


def trickle(every=0.5, head=b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"):
    """Headers, then one byte of body every `every` seconds, for as long as the client reads."""
    def answer(conn, _request, stop):
        conn.sendall(head)
        while not stop.is_set():
            conn.sendall(b" ")
            time.sleep(every)
    return answer


def endless_stream(every=0.05, chunk=b'data: {"choices": [{"text": "x"}]}\n\n'):
    """A 200 event stream that never ends."""
    def answer(conn, _request, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        while not stop.is_set():
            conn.sendall(chunk)
            time.sleep(every)
    return answer


def hang(conn, _request, stop):
    """Read the request, never answer."""
    stop.wait(60)


def stream(*events, usage=None):
    """A complete event stream of the given `data:` payloads (bytes), then [DONE]."""
    body = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return reply(200, body, (b"Content-Type: text/event-stream",))
