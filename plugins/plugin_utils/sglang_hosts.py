"""Where hosts reach each other: one reading of the inventory's addresses (render, router)."""

import ipaddress
import re

from ansible.errors import AnsibleFilterError


def bracketed(address):
    """An address as a URL's host part: IPv6 literals in brackets."""
    address = str(address)
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def advertised_address(host, hostvars):
    """Where other hosts reach `host`: its sglang_advertise_host, ansible_host or name."""
    facts = hostvars[host]
    return bracketed(facts.get("sglang_advertise_host") or facts.get("ansible_host") or host)


# A DNS name (RFC 1123 labels), for an address the server binds or is reached at.
DNS_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def host_address(value, where):
    """`value` when it is an IP address (an IPv6 one bare or in brackets) or a DNS name, else
    an error naming `where`: it lands in the server's config and the drift check's --url, where
    a space would split argv and a '%' be a systemd specifier."""
    text = str(value)
    try:
        ipaddress.ip_address(text[1:-1] if text.startswith("[") and text.endswith("]") else text)
        return text
    except ValueError:
        pass
    if DNS_NAME.fullmatch(text):
        return text
    raise AnsibleFilterError(f"{where}: {text[:80]!r} is not an IP address or a host name "
                             "(0.0.0.0, ::, 10.0.0.5, gpu1.example.com)")
