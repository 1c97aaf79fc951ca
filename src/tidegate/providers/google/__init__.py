"""Google Cloud and Google AI: Claude on Vertex AI (`kind = "vertex"`), Gemini (`kind = "gemini"`), their
embeddings, and Google credentials."""
