"""Values as the filters read them: native types, integers, switches, option names.

Shared by the filter files (one reading of each, no filter importing another's private names).
"""

import math
import re

from ansible.errors import AnsibleFilterError

# An SGLang or router option name once dashed: `tp-size`, `enable-p2p-check`.
ARG_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")  # whole: fullmatch


def plain(value):
    """Native Python types: ansible-core 2.19 hands filters tagged str/int/dict subclasses."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def positive(value):
    """A finite number above 0 from a number or its text, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def truthy(value):
    """A switch as YAML, the command line or an env file may spell it on."""
    return value is True or str(value).lower() in ("1", "true", "yes")


def int_arg(args, name, default=None):
    """The integer value of argument `name` (None when unset); a non-integer is an error."""
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise AnsibleFilterError(f"--{name}: {value!r} is not an integer")
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise AnsibleFilterError(f"--{name}: {value!r} is not an integer") from exc
