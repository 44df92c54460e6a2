"""Programs the benches observe or drive. known_profile.py runs as a plain script under the
machine's python3 (the standard library only), so the profiler sees an ordinary CPython
process, not the venv; http_load.py (a keep-alive HTTP/SSE server and load generators, uvloop)
runs under the venv's python as ``python -m bench.workloads.http_load``."""
