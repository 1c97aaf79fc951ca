"""Routing, the relay (all timing), usage accounting and recording."""
