"""hermes-queue: the Hermes agent HTTP API, scaled out over arq workers and Redis Streams."""

__version__ = "0.1.0"
__all__ = ["__version__"]
