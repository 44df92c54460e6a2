"""zerotrace shared library: event contract, codec, ports (bus, store), settings, names.

Every service imports this package; no service imports another service.
"""

__version__ = "0.1.0"
