"""OpenAI and OpenAI-compatible upstreams (`kind = "openai"`): chat completions, the Responses API passed
through, images and embeddings."""
