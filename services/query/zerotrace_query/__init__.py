"""zerotrace query: indexes derived records into the store and serves them (HTTP, gRPC)."""
