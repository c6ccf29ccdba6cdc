"""A module's main() run as Ansible would, without Ansible running, its result parsed: the
set_module_args pattern (support.run_main puts the arguments where AnsibleModule reads them)."""

import json

from support import ROOT, run_main


def run_module(name, args, check_mode=False):
    """(result dict, exit code) of module `name`'s main() (from plugins/modules) with `args`."""
    path = ROOT / "plugins" / "modules" / f"{name}.py"
    text, code = run_main(path, args, check_mode)
    return json.loads(text), code
