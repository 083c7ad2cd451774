"""Development tools that are not the sidecar: the vLLM simulator, the load generator, the sweep.

Used by the demo, the tests and the benchmarks; nothing under sidecar/, tap/ or core/ imports them.
"""
