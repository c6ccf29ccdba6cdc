"""Run a module's main() as Ansible would, without Ansible running: the set_module_args
pattern (the arguments where AnsibleModule reads them), the result parsed from stdout."""

import contextlib
import io
import json

from ansible.module_utils import basic

from support import load_module


@contextlib.contextmanager
def set_module_args(args):
    """The module arguments AnsibleModule() will read, for the duration of the block."""
    saved = basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
    basic._ANSIBLE_PROFILE = "legacy"
    try:
        yield
    finally:
        basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE = saved


def run_module(name, args, check_mode=False):
    """(result dict, exit code) of module `name`'s main() with `args`."""
    module = load_module(name)
    args = dict(args, _ansible_check_mode=check_mode)
    out = io.StringIO()
    code = None
    with set_module_args(args), contextlib.redirect_stdout(out):
        try:
            module.main()
        except SystemExit as exc:
            code = exc.code
    return json.loads(out.getvalue()), code
