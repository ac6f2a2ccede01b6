"""Workload sizing: what a request's images, videos and audio put in SGLang's feature pool, and the KV cost.

Pure core: no typer, rich or torch, and no transformers at run time.
"""
