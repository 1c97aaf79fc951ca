"""One package per door: each public API surface tidegate speaks (docs/architecture.md).

A door parses its wire format into the gateway's request, and renders the gateway's events in its own
shape. Doors never import each other: what two doors share lives one level up, in `server/`.
"""
