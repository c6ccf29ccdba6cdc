"""Every filter of the sglang.deploy collection under its short name, for this repository's
playbooks and roles (ansible.cfg's filter_plugins).

The filters themselves live once, in the collection's plugins/filter/
(found through ansible.cfg's collections_path). The roles name them by FQCN
(sglang.deploy.sglang_pip_args), as a consumer of the collection does; this file keeps the
short names working for this repository's inventories, ad hoc commands and extra vars.
"""

from ansible_collections.sglang.deploy.plugins.filter import (
    sglang_caches, sglang_fleet, sglang_inputs, sglang_preflight, sglang_render, sglang_router,
    sglang_tune, sglang_upgrade, sglang_verify)

FILES = (sglang_caches, sglang_fleet, sglang_inputs, sglang_preflight, sglang_render,
         sglang_router, sglang_tune, sglang_upgrade, sglang_verify)


class FilterModule:
    """The union of the collection's filter files; a name defined twice is an error."""

    def filters(self):
        merged = {}
        for module in FILES:
            for name, func in module.FilterModule().filters().items():
                if name in merged:
                    raise RuntimeError(f"filter {name} is defined twice ({module.__name__})")
                merged[name] = func
        return merged
