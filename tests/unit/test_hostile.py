"""Every module's main(), driven with hostile arguments, files and servers (issue 13).

Whatever the arguments (wrong types, control characters, paths out of the base dir, odd
numbers), whatever the files under the base dir (manifests and locks of the wrong type,
`current` pointing out, a base dir that is a file) and whatever the server answers (hangs,
trickles, endless streams, 401, bad status lines, JSON of the wrong shape, echoes of the key),
each module ends with exit_json or fail_json: never a traceback, a failure always has a message,
and its output never holds the API key or any 8-character piece of it.
"""

import contextlib
import json
import math
import os
import tempfile
import traceback
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from support import ROOT, _load, examples, module_options, run_main
from support.hostile import hang, raw, reply, serve, stream, trickle


KEY = "hostileKEY-" + "Zx81Qp40" * 4
PIECES = [KEY[i:i + 8] for i in range(len(KEY) - 7)]
LIBRARIES = [ROOT / "plugins" / "modules"]
# Owned by another engineer in issue 13 (the lead handles their hostile cases): driven here
# with the arguments that cannot run commands for a long time.
# Modules with code (sglang_progress.py only documents its action plugin).
MODULES = sorted({p.stem: p for lib in LIBRARIES for p in lib.glob("*.py")
                  if "def main(" in p.read_text()}.items())
HTTP_OPTIONS = {"url", "router_url", "worker"}
SECONDS = {"timeout", "drain_timeout", "poll", "slice"}

TEXT = st.sampled_from([
    "", " ", "\n", "x\r\ny", "a\0b", "\u2028", "../../etc", "/etc/passwd", "-rf", "--help",
    "20261101T000000Z-0123abcd", "20261101T000000Z-0123abcd\n", "20261101T000000Z", "nan",
    "{{ lookup('pipe', 'id') }}", "x" * 3000, "sglang", "0644", "9999", "é\udcff"[0],
])
SCALAR = st.one_of(TEXT, st.integers(-3, 5), st.sampled_from([2 ** 70, -1.5, 0.0, True, None]))
ANY = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)


def _echo_key(conn, request, _stop):
    """A server that answers every path with what a hostile server would echo of the key."""
    bearer = next((line.split(b"Bearer ", 1)[1] for line in request.split(b"\r\n")
                   if line.lower().startswith(b"authorization: bearer ")), b"none")
    path = request.split(b" ", 2)[1]
    piece = bearer[3:15]
    if path.startswith((b"/server_info", b"/get_server_info", b"/model_info", b"/get_model_info")):
        body = json.dumps({bearer.decode(): {"api_key": bearer.decode()},
                           "note": "key " + bearer.decode() + " piece " + piece.decode(),
                           "internal_states": "x"}).encode()
    elif path.startswith(b"/v1/models"):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
    elif path.startswith(b"/workers"):
        body = json.dumps({"workers": [{"url": piece.decode(), "is_healthy": "x"}, 5]}).encode()
    elif path.startswith(b"/v1/"):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                     b'data: {"choices": [{"text": "' + piece + b'"}], "usage": {"completion_tokens": "'
                     + piece + b'"}}\n\ndata: [null]\n\n')
        return
    else:
        body = b"ok " + bearer + b" " + piece
    conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


ANSWERS = {
    "hang": hang,
    "trickle": trickle(0.1),
    "unauthorized": reply(401, b'{"detail": "bad key"}'),
    "bad-status": raw(b"HTTP/1.1 abc OK\r\n\r\n"),
    "short": raw(b"HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n{\"usage\""),
    "list": reply(200, b"[1, 2, 3]"),
    "usage-list": stream(b'{"choices": [{"text": "x"}], "usage": [5]}'),
    "echo": _echo_key,
}


@pytest.fixture(scope="module")
def urls():
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(serve(answer)) for name, answer in ANSWERS.items()}


def hostile_base(root):
    """A base dir holding every kind of bad file a release or lock can meet."""
    base = root / "base"
    releases = base / "releases"
    releases.mkdir(parents=True)
    contents = {"20261101T000000Z-0000000a": "[]", "20261102T000000Z-0000000b": '"text"',
                "20261103T000000Z-0000000c": '{"id": "../../victim", "status": "failed"}',
                "20261104T000000Z-0000000d": '{"status": "good", "files": {"config.yaml": 5}}',
                "20261105T000000Z-0000000e": "{broken"}
    for name, text in contents.items():
        (releases / name).mkdir()
        (releases / name / "manifest.json").write_text(text)
    os.symlink("/", base / "current")
    (base / ".deploy.lock").write_text("[null]")
    (root / "victim").mkdir()
    (root / "victim" / "keep").write_text("x")
    (root / "a-file").write_text("not a directory")
    return base


def options_of(path):
    return module_options(path)


def args_for(path, data, urls, root):
    """Hostile arguments for every option of the module, drawn by hypothesis."""
    paths = [str(root / "base"), str(root / "a-file"), str(root / "missing"), "/proc/1", "",
             str(root / "base" / "releases")]
    args = {}
    for name, spec in options_of(path).items():
        kind = (spec or {}).get("type", "str")
        if name in HTTP_OPTIONS:
            value = data.draw(st.sampled_from(
                [*urls.values(), "ftp://x", "http://", "http://127.0.0.1:1", "not a url",
                 "http://h:99999"]), label=name)
        elif name in SECONDS:
            # nan passes `< 0` checks, inf overflows a sleep or a socket (issue 22).
            value = data.draw(st.sampled_from([0, 1, -1, 0.3, "abc", None, float("nan"),
                                               float("inf"), 1e300]), label=name)
        elif name in ("min_free_gb",):
            value = data.draw(st.sampled_from([0, 1.5, -1, float("nan"), float("inf"), 1e300]),
                              label=name)
        elif name == "token":
            value = data.draw(st.sampled_from(["", "hf_x\0y", "hf_x\ny", KEY]), label=name)
        elif name == "api_key":
            value = data.draw(st.sampled_from([KEY, ""]), label=name)
        elif name in ("venv", "base_dir", "model_path"):
            value = data.draw(st.sampled_from(paths), label=name)
        elif name == "nvidia_smi":
            value = data.draw(st.sampled_from(["/bin/false", "/nonexistent", "true"]), label=name)
        elif name in ("concurrency",):
            value = data.draw(st.lists(st.integers(-2, 3), max_size=2), label=name)
        elif name in ("requests_per_level", "warmup", "max_tokens", "keep_good", "keep_other",
                      "journal_lines", "max_lines", "stale_after"):
            value = data.draw(st.sampled_from([-1, 0, 1, 2, "abc", None]), label=name)
        elif kind == "path":
            value = data.draw(st.sampled_from(paths), label=name)
        elif name == "files":
            value = data.draw(st.lists(st.fixed_dictionaries(
                {"name": st.sampled_from(["config.yaml", "../x", "manifest.json", "a\nb", "", 5]),
                 "content": st.sampled_from(["x\n", "\0", 5, None, KEY[:3]]),
                 "mode": st.sampled_from(["0644", "999", "abc", 7])}), max_size=2), label=name)
        elif name in ("release", "stamp"):
            value = data.draw(st.one_of(TEXT, st.sampled_from(
                ["20261103T000000Z-0000000c", "20261101T000000Z-0000000a", "../../victim"])),
                label=name)
        else:
            value = data.draw(ANY, label=name)
        if data.draw(st.booleans(), label=f"give {name}") or (spec or {}).get("required"):
            args[name] = value
    # Bound what could legitimately take long (deadlines are tested elsewhere).
    # Bound what could legitimately take long (deadlines are tested elsewhere); nan and inf
    # are kept: each module must refuse them at once.
    for name in SECONDS & set(options_of(path)):
        value = args.get(name)
        if not isinstance(value, (int, float)) or (math.isfinite(value) and value > 1):
            args[name] = 0.3 if name != "timeout" or "ready" not in path.stem else 1
    if path.stem in ("sglang_args_check", "sglang_pip_check"):
        args["venv"] = str(root / "missing")
    return args


def check_output(text, code):
    assert "Traceback" not in text
    result = json.loads(text)  # a module always answers with one JSON object
    assert code in (0, 1, None)
    if result.get("failed"):
        assert isinstance(result.get("msg"), str) and len(result["msg"]) >= 10, result
    for piece in PIECES:
        assert piece not in text, f"a piece of the key leaked: {piece}"
    return result


@pytest.mark.parametrize("name, path", MODULES, ids=[m[0] for m in MODULES])
@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_arguments_files_and_servers(name, path, data, urls):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = hostile_base(root)
        if not data.draw(st.booleans(), label="current points at /"):
            os.unlink(base / "current")
        args = args_for(path, data, urls, root)
        try:
            text, code = run_main(path, args)
        except OverflowError as exc:
            # ansible-core's own int check (check_type_int: Decimal() of a list such as
            # [2**70, '', '']) raises before any of this project's code runs; Ansible reports
            # it as a module failure. Not this project's to fix: the example is set aside.
            origin = traceback.extract_tb(exc.__traceback__)[-1].filename
            if not origin.endswith("ansible/module_utils/common/validation.py"):
                raise
            reject()
        check_output(text, code)
        assert (root / "victim" / "keep").exists(), "a module deleted outside its base dir"


@pytest.mark.parametrize("state", ["info", "cleanup", "present", "active", "good", "failed"])
def test_release_module_on_a_hostile_base_dir_says_what_to_fix(tmp_path, state):
    """The base dir above: `current` -> / is refused by name, nothing outside is touched."""
    base = hostile_base(tmp_path)
    # Its manifest is a JSON list.
    args = {"base_dir": str(base), "state": state, "release": "20261101T000000Z-0000000a",
            "reason": "x", "stamp": "20261201T000000Z",
            "files": [{"name": "config.yaml", "content": "x\n"}]}
    text, _ = run_main(LIBRARIES[0] / "sglang_release.py", args)
    result = check_output(text, None)
    assert result["failed"]
    assert "releases/<id>" in result["msg"] or "no readable manifest" in result["msg"]
    os.unlink(base / "current")
    text, _ = run_main(LIBRARIES[0] / "sglang_release.py", args)
    result = check_output(text, None)
    assert (tmp_path / "victim" / "keep").exists()
    if state in ("active", "good", "failed"):
        assert result["failed"] and "no readable manifest" in result["msg"]
    else:
        assert not result.get("failed"), result


@pytest.mark.parametrize("base", ["a-file", "a-file/sub"])
def test_lock_on_a_base_dir_that_cannot_hold_it_says_so(tmp_path, base):
    hostile_base(tmp_path)
    text, _ = run_main(LIBRARIES[0] / "sglang_lock.py",
                       {"base_dir": str(tmp_path / base), "run_id": "r"})
    result = check_output(text, None)
    assert result["failed"] and "sglang_base_dir must be a writable directory" in result["msg"]


@pytest.mark.parametrize("answer", ["echo", "unauthorized", "bad-status", "list"])
def test_server_info_never_shows_the_key_or_a_piece(urls, answer):
    text, _ = run_main(LIBRARIES[0] / "sglang_server_info.py",
                       {"url": urls[answer], "api_key": KEY, "timeout": 2})
    result = check_output(text, None)
    assert result.get("failed") or result["server_info"]


@pytest.mark.parametrize("name, path", MODULES, ids=[m[0] for m in MODULES])
def test_module_documentation_is_yaml(name, path):
    """ansible-doc and this harness read DOCUMENTATION; sglang_journal's did not parse."""
    module = _load(f"doc_{name}", path)
    assert isinstance(yaml.safe_load(module.DOCUMENTATION)["options"], dict)
    assert isinstance(yaml.safe_load(module.RETURN), dict)
