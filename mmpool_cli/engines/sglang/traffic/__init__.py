"""SGLang's side of traffic: its request logs, bench_serving's requests, and how it holds leases.

Pure core: standard library only.
"""
