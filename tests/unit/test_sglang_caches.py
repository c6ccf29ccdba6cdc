"""Every cache SGLang and its kernels write goes under the unit's writable cache directory.

The names are checked against the real sglang release the role pins (its wheel, read with
`ast`), so a release that adds a cache SGLang redirects, or renames one, fails here.
"""

import ast

import pytest
from ansible.errors import AnsibleFilterError
from support.wheels import venv_with

from ansible_collections.sglang.deploy.plugins.filter import sglang_render as render
from ansible_collections.sglang.deploy.plugins.plugin_utils import sglang_cache_env as cache

VERSION = "0.5.23"


def _environ_source():
    site = venv_with(VERSION) / "lib" / "python3.11" / "site-packages"
    return ast.parse((site / "sglang" / "srt" / "environ.py").read_text())


def _redirected_by_sglang(tree):
    """The keys of `third_party_cache_defaults()`: what `import sglang` setdefaults."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "third_party_cache_defaults":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    return {k.value for k in inner.keys if isinstance(k, ast.Constant)}
    raise AssertionError("third_party_cache_defaults() is gone from srt/environ.py")


def _declared_envs(tree):
    return {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


@pytest.mark.network
def test_every_cache_the_pinned_sglang_redirects_is_set_under_the_cache_dir():
    tree = _environ_source()
    redirected = _redirected_by_sglang(tree)
    assert {"TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH",
            "TILELANG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"} <= redirected
    env = cache.cache_env("/opt/sglang/cache")
    assert redirected <= set(env), f"not set by the role: {sorted(redirected - set(env))}"
    sglang_named = {name for name in env if name.startswith("SGLANG_")}
    assert sglang_named <= _declared_envs(tree), "an SGLANG_* name the pinned release lacks"
    assert all(value == "/opt/sglang/cache" or value.startswith("/opt/sglang/cache/")
               for value in env.values())


def test_sglang_layout_is_kept_and_the_jit_cache_is_set_explicitly():
    env = cache.cache_env("/c/")
    # SGLang's own layout under SGLANG_CACHE_DIR (third_party_cache_defaults), so a cache
    # warmed by SGLang's tools elsewhere can be copied in as one directory.
    assert env["SGLANG_CACHE_DIR"] == "/c/sglang"
    assert env["TRITON_CACHE_DIR"] == "/c/sglang/triton"
    assert env["CUDA_CACHE_PATH"] == "/c/sglang/nv"
    # Unset, the JIT cache is ~/.cache/sglang/jit whatever SGLANG_CACHE_DIR says.
    assert env["SGLANG_JIT_CACHE_DIR"] == "/c/sglang/jit"
    assert env["HF_HOME"] == "/c/huggingface"
    assert cache.cache_env("") == {}


@pytest.mark.parametrize("bad", ["relative/cache", "/with space", "/new\nline"])
def test_bad_cache_dir_is_refused(bad):
    with pytest.raises(AnsibleFilterError, match="sglang_service_cache_dir"):
        cache.cache_env(bad)


def test_the_unit_lines_come_with_the_sandbox_only():
    lines = render.sglang_unit_hardening({"ProtectSystem": "strict"}, ["/opt/ml-env"],
                                         "/opt/sglang/cache")
    assert "ReadWritePaths=/opt/sglang/cache" in lines
    assert "Environment=SGLANG_JIT_CACHE_DIR=/opt/sglang/cache/sglang/jit" in lines
    assert "Environment=TORCHINDUCTOR_CACHE_DIR=/opt/sglang/cache/sglang/inductor" in lines
    assert lines[-len(cache.unit_cache_env("/c")):] == \
        cache.unit_cache_env("/opt/sglang/cache")
    # Without a sandbox the home is writable and SGLang's defaults stand.
    assert render.sglang_unit_hardening({}, ["/opt/ml-env"], "/opt/sglang/cache") == []


def test_a_local_model_directory_keeps_sglang_off_the_hub():
    assert render.hub_env("/srv/models/Qwen3.6-27B") == ["Environment=HF_HUB_OFFLINE=1"]
    assert render.hub_env("Qwen/Qwen3.6-27B") == []
    assert render.hub_env("") == []
