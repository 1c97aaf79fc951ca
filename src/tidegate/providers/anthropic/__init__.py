"""The Anthropic Messages API (`kind = "anthropic"`): its provider and decoder, and the request body every
Claude route sends (Bedrock and Vertex AI too)."""
