"""zerotrace profiler-agg: stack samples in, folded-stack profile windows out."""
