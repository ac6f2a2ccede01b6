"""mmpool: plan and check SGLang's multimodal feature-transport pools before launch."""

__version__ = "0.1.0"
