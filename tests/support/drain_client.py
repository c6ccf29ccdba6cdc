"""A client that sends long streaming requests to SGLang without pause, run on a test host
(python3, standard library) through deploys and rollbacks, counting what became of each:

  completed  the stream ended with [DONE]
  cut        the answer had begun, then the connection broke or the stream ended early
  refused    no answer began (connection refused or reset, an HTTP error): nothing was lost

Before each request it asks /health, as a balancer's health check does, and waits while the
answer is not 200: SGLang answers 503 while it drains. Counts are written to --out as JSON
after every request; the client stops when the file --stop exists.

    python3 drain_client.py --url http://127.0.0.1:30000 --key-file /opt/sglang/secrets.json \
        --out /tmp/drain.json --stop /tmp/drain.stop
"""

import argparse
import http.client
import json
import os
import threading
import time
import urllib.parse

LOCK = threading.Lock()
COUNTS = {"completed": 0, "cut": 0, "refused": 0, "health_waits": 0}


def bump(key, out):
    with LOCK:
        COUNTS[key] += 1
        tmp = out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(COUNTS, handle)
        os.replace(tmp, out)


def healthy(host, port):
    try:
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def one_request(host, port, key, tokens):
    """completed, cut or refused."""
    body = json.dumps({"model": "default", "prompt": "Tell a long story.", "max_tokens": tokens,
                       "stream": True})
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    began = False
    try:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("POST", "/v1/completions", body, headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return "refused"
        while True:
            line = resp.readline()
            if not line:
                return "cut" if began else "refused"
            began = True
            if line.strip() == b"data: [DONE]":
                return "completed"
    except (OSError, http.client.HTTPException):
        return "cut" if began else "refused"


def worker(args, key):
    url = urllib.parse.urlsplit(args.url)
    while not os.path.exists(args.stop):
        if not healthy(url.hostname, url.port):
            bump("health_waits", args.out)
            time.sleep(0.2)
            continue
        bump(one_request(url.hostname, url.port, key, args.tokens), args.out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--stop", required=True)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=120)
    args = parser.parse_args()
    with open(args.key_file, encoding="utf-8") as handle:
        key = json.load(handle).get("api-key", "")
    threads = [threading.Thread(target=worker, args=(args, key)) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
