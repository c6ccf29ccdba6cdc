"""Keep secrets out of what the project saves or prints: standard library only.

SGLang returns its API keys in `/server_info` (0.5.23: build_server_info over
ServerArgs.resolved_dict(), sglang/srt/entrypoints/http_server.py) and only redacts its
watermark keys. Everything the role records from a server goes through `redact` first.

A key is hidden wherever it appears: as a value, inside a longer text, as an object's *key*,
and piecewise: any run of 8 or more of its characters (a server that echoes half a key, a text
cut in the middle of one) is replaced too. Texts are redacted before they are shortened
(`excerpt`), never after.
"""

import re

REDACTED = "<redacted>"
# The shortest piece of a key that is never shown (a key is 16-512 characters).
PIECE = 8
# Field names that hold secrets: api_key, admin_api_key, watermark_key(_b), hf_token, ...
# Bounded by `_`/`-` so counts like max_total_tokens or num_draft_tokens are left alone.
SECRET_NAME = re.compile(
    r"(?i)(^|[_-])(api[_-]?key|admin[_-]?api[_-]?key|access[_-]?key|watermark[_-]?key(_b)?|"
    r"secret|password|passwd|token|credentials?)($|[_-])"
)
ENV_LINE = re.compile(r'^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$')


def secret_name(name):
    return isinstance(name, str) and bool(SECRET_NAME.search(name))


def redact_text(text, secrets=()):
    """`text` with every secret, and every run of PIECE or more of a secret's characters, hidden."""
    text = str(text)
    secrets = [s for s in secrets if isinstance(s, str) and s]
    if not secrets or not text:
        return text
    hidden = [False] * len(text)
    for secret in secrets:
        # One pass over the text against the set of the secret's pieces: linear in both, also
        # for a hostile secret of megabytes (a find per piece was their product).
        width = min(PIECE, len(secret))
        pieces = {secret[i:i + width] for i in range(len(secret) - width + 1)}
        for start in range(len(text) - width + 1):
            if text[start:start + width] in pieces:
                hidden[start:start + width] = [True] * width
    if not any(hidden):
        return text
    out, index = [], 0
    while index < len(text):
        if hidden[index]:
            while index < len(text) and hidden[index]:
                index += 1
            out.append(REDACTED)
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def excerpt(value, secrets=(), limit=200):
    """A short, printable, redacted text of `value` for an error message: redacted first."""
    text = redact_text(value if isinstance(value, str) else repr(value), secrets)
    return text if len(text) <= limit else text[:limit] + "..."


def redact(value, secrets=()):
    """A copy of `value` with secret-named fields and any known secret string replaced."""
    secrets = [s for s in secrets if isinstance(s, str) and s]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            name = redact(key, secrets) if isinstance(key, str) else key
            out[name] = REDACTED if secret_name(key) and item not in (None, "") \
                else redact(item, secrets)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


def redact_env_text(text):
    """An EnvironmentFile's text with the values of secret-named variables replaced."""
    lines = []
    for line in text.splitlines(keepends=True):
        match = ENV_LINE.match(line.rstrip("\n"))
        if match and secret_name(match.group("name")):
            line = f'{match.group("name")}="{REDACTED}"' + ("\n" if line.endswith("\n") else "")
        lines.append(line)
    return "".join(lines)
