"""Keep secrets out of what the project saves or prints: standard library only.

SGLang returns its API keys in `/server_info` (0.5.23: build_server_info over
ServerArgs.resolved_dict(), sglang/srt/entrypoints/http_server.py) and only redacts its
watermark keys. Everything the role records from a server goes through `redact` first.
"""

import re

REDACTED = "<redacted>"
# Field names that hold secrets: api_key, admin_api_key, watermark_key(_b), hf_token, ...
# Bounded by `_`/`-` so counts like max_total_tokens or num_draft_tokens are left alone.
SECRET_NAME = re.compile(
    r"(?i)(^|[_-])(api[_-]?key|admin[_-]?api[_-]?key|access[_-]?key|watermark[_-]?key(_b)?|"
    r"secret|password|passwd|token|credentials?)($|[_-])"
)
ENV_LINE = re.compile(r'^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$')


def secret_name(name):
    return isinstance(name, str) and bool(SECRET_NAME.search(name))


def redact(value, secrets=()):
    """A copy of `value` with secret-named fields and any known secret string replaced."""
    secrets = [s for s in secrets if s]
    if isinstance(value, dict):
        return {k: (REDACTED if secret_name(k) and v not in (None, "") else redact(v, secrets))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            value = value.replace(secret, REDACTED)
        return value
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
