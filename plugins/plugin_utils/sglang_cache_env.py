"""Where SGLang and the kernels it runs write their caches: one writable directory.

Under the unit's sandbox (ProtectSystem=strict, ProtectHome) the service user's home is
read-only, and every library defaults to a place under it. Read from the installed
sglang 0.5.23 and its dependencies:

- `import sglang` calls `sglang.srt.environ.redirect_third_party_caches()`
  (`sglang/__init__.py`), which *setdefaults* TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR,
  CUDA_CACHE_PATH, TILELANG_CACHE_DIR and FLASHINFER_WORKSPACE_BASE under SGLANG_CACHE_DIR
  (default `~/.cache/sglang`, `srt/environ.py` `third_party_cache_defaults`). It "silently
  does nothing" when FlashInfer or Inductor got there first, so each is set here explicitly,
  with SGLang's own layout.
- SGLANG_JIT_CACHE_DIR does not follow SGLANG_CACHE_DIR: unset it is `~/.cache/sglang/jit`
  (`sglang/kernels/jit/utils/compile/cache.py`).
- FlashInfer appends `.cache/flashinfer` to FLASHINFER_WORKSPACE_BASE (`flashinfer/jit/env.py`).
- Triton keeps dumps and overrides under TRITON_HOME (`~/.triton`); the Hugging Face hub,
  outlines, numba and torch.hub follow XDG_CACHE_HOME; HF_HOME is the hub's own root.

Values set in the release's env file (sglang_env) win: systemd's EnvironmentFile= overrides
Environment=.
"""

import os

from ansible.errors import AnsibleFilterError


def cache_env(cache_dir):
    """The cache variables for a writable `cache_dir`, in a stable order ({} for "")."""
    cache_dir = str(cache_dir or "").rstrip("/")
    if not cache_dir:
        return {}
    if not os.path.isabs(cache_dir) or any(c.isspace() or ord(c) < 32 for c in cache_dir):
        raise AnsibleFilterError(
            f"sglang_service_cache_dir: {cache_dir!r} must be an absolute path without spaces")
    sglang = f"{cache_dir}/sglang"
    return {
        "XDG_CACHE_HOME": cache_dir,
        "HF_HOME": f"{cache_dir}/huggingface",
        "SGLANG_CACHE_DIR": sglang,
        "SGLANG_JIT_CACHE_DIR": f"{sglang}/jit",
        "TRITON_HOME": cache_dir,
        "TRITON_CACHE_DIR": f"{sglang}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{sglang}/inductor",
        "CUDA_CACHE_PATH": f"{sglang}/nv",
        "TILELANG_CACHE_DIR": f"{sglang}/tilelang",
        "FLASHINFER_WORKSPACE_BASE": sglang,
        "NUMBA_CACHE_DIR": f"{cache_dir}/numba",
    }


def unit_cache_env(cache_dir):
    """The same as systemd unit lines, `Environment=NAME=value`."""
    return [f"Environment={name}={value}" for name, value in cache_env(cache_dir).items()]
