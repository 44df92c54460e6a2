"""Programs the benches observe. Each runs as a plain script under the machine's python3 (the
standard library only), so the profiler sees an ordinary CPython process, not the venv."""
