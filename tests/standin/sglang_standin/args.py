"""Read an SGLang command line the way `sglang.launch_server` does, without its parser.

The stand-in must start from the very release the role renders: `--config PATH` (a YAML
file of dashed keys) plus command-line flags, which win over the file. Flags are taken
generically (`--name value` or a bare `--flag` meaning true) so that any SGLang argument
is accepted; the ones the stand-in reports back are read with `get`.
"""

import yaml


class ArgsError(ValueError):
    pass


def parse_argv(argv):
    """Return {dashed-name: value} for an SGLang-style argv."""
    args = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise ArgsError(f"unexpected positional argument {token!r}")
        name = token[2:]
        if "=" in name:
            name, value = name.split("=", 1)
            if name == "config":
                # SGLang silently ignores `--config=PATH`; the stand-in refuses it loudly so a
                # test catches a deployment that renders it.
                raise ArgsError("--config=PATH is ignored by SGLang: use --config PATH")
            args[name] = value
            i += 1
            continue
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            args[name] = argv[i + 1]
            i += 2
        else:
            args[name] = True
            i += 1
    return args


def load_args(argv):
    """Merge `--config` YAML and the command line (the command line wins)."""
    cli = parse_argv(argv)
    merged = {}
    config_path = cli.pop("config", None)
    if config_path:
        with open(config_path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        if not isinstance(data, dict):
            raise ArgsError(f"{config_path}: expected a mapping of dashed SGLang arguments")
        merged.update({str(k).replace("_", "-"): v for k, v in data.items()})
    merged.update(cli)
    if "model-path" not in merged:
        raise ArgsError("--model-path is required")
    return merged


def get(args, name, default=None, cast=None):
    value = args.get(name, default)
    if value is None or cast is None:
        return value
    if cast is bool:
        return value is True or str(value).lower() in ("1", "true", "yes")
    return cast(value)
