"""Import the project's plugins, modules and the stand-in as plain Python, without Ansible running."""

import importlib.util
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "sglang"

# The collection source (filters, module_utils) imports as ansible_collections.sglang.deploy.*,
# as it does under Ansible (ansible.cfg's collections_path).
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests" / "standin"))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError:
        del sys.modules[name]
        raise
    return module


def load_module(name):
    """A module from plugins/modules, importable for its functions."""
    path = ROOT / "plugins" / "modules" / f"{name}.py"
    return _load(name, path)


def module_options(path):
    """A module's documented options, its doc fragments' (extends_documentation_fragment) merged
    in as ansible-doc merges them: the fragment's options beside the module's own."""
    import yaml
    from ansible_collections.sglang.deploy.plugins.doc_fragments import sglang as fragments

    doc = yaml.safe_load(_load(f"doc_{path.stem}", path).DOCUMENTATION)
    options = dict(doc.get("options") or {})
    for name in doc.get("extends_documentation_fragment") or []:
        variant = name.removeprefix("sglang.deploy.sglang.")
        shared = yaml.safe_load(getattr(fragments.ModuleDocFragment, variant.upper()))["options"]
        assert not set(shared) & set(options), f"{path.name} documents {name}'s options again"
        options.update(shared)
    return options


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]




def run_main(path, args, check_mode=False):
    """(printed text, SystemExit code) of a module's main() given these arguments, as
    Ansible would run it (the module reads its arguments from basic._ANSIBLE_ARGS)."""
    import contextlib
    import io
    import json

    from ansible.module_utils import basic

    module = _load(f"main_{path.stem}", path)
    out = io.StringIO()
    saved = basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE
    args = {**args, "_ansible_check_mode": True} if check_mode else args
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
    basic._ANSIBLE_PROFILE = "legacy"
    code = None
    try:
        with contextlib.redirect_stdout(out):
            try:
                module.main()
            except SystemExit as exc:
                code = exc.code
    finally:
        basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE = saved
    return out.getvalue(), code


def examples(n):
    """`n` hypothesis examples under the full profile (`make test`), a fifth under `check`
    (`make check`): the profile loaded by tests/conftest.py scales what a test asks for."""
    from hypothesis import settings

    return max(5, n * settings.default.max_examples // 100)
