"""The images door: `POST /v1/images/generations` (docs/api-operations.md §8)."""
