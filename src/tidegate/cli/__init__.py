"""The `tidegate` command line: `main` (the group and its commands), `serve`, `maintain`
(check-config, config-schema, db upgrade), `keys`, `seed` and `client` (the commands that call a
running gateway)."""
