"""The ASGI app: one module per door."""
