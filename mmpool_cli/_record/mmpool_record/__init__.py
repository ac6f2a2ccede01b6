"""mmpool's recording hook: wraps SGLang's multimodal feature pools when they are imported.

Standard library only (``prometheus_client`` optional, for metrics): it is loaded by the bootstrap
``sitecustomize.py`` in the server's own Python, where mmpool is not installed.
"""
