"""zerotrace collector: eBPF probes on this node, Avro records to the bus."""
