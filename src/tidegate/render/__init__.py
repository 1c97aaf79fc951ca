"""Renderers: canonical events → the wire frames of one door. Pure; they own ids and bookkeeping."""
