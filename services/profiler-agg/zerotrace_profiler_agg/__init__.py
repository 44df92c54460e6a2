"""zerotrace profiler-agg: raw.stack samples and raw.gpu calls in, derived.profile windows out.

windows.py      tumbling event-time windows with per-series watermarks (pure)
gpu_memory.py   the bounded live GPU allocation table (pure)
gpu_fold.py     raw.gpu -> GPU_MEM_ALLOC, GPU_LAUNCH windows and GPU_MEM_INUSE snapshots (pure)
profile_fold.py both inputs, tick and flush: the fold every shell drives (pure)
profile_step.py bytes in, messages out, dead letters: a Step (zerotrace/step.py), driven by the
                shared faust shell or the embedded runner; settings.py the knobs
"""
