"""Operator pages and admin APIs: the console, keys, routes and the generations API."""
