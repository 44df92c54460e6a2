"""Why a captured packet carries no TCP segment for reassembly; each reason is a counter."""

from __future__ import annotations

import enum


class Skip(enum.StrEnum):
    UNSUPPORTED_LINK = "unsupported_link"  # a link type this decoder does not know
    NON_IP = "non_ip"  # ARP, LLDP, ...
    NON_TCP = "non_tcp"  # UDP, ICMP, ESP, ...
    FRAGMENT = "fragment"  # IP fragments are not reassembled (TCP avoids them with PMTU)
    MALFORMED = "malformed"  # a header is cut short or inconsistent
