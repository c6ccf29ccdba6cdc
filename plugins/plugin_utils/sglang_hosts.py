"""Where hosts reach each other: one reading of the inventory's addresses (render, router)."""


def bracketed(address):
    """An address as a URL's host part: IPv6 literals in brackets."""
    address = str(address)
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def advertised_address(host, hostvars):
    """Where other hosts reach `host`: its sglang_advertise_host, ansible_host or name."""
    facts = hostvars[host]
    return bracketed(facts.get("sglang_advertise_host") or facts.get("ansible_host") or host)
