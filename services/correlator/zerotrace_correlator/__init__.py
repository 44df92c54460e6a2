"""zerotrace correlator: raw events in, spans, LLM metrics and traces out."""
