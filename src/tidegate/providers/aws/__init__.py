"""Amazon Web Services: Claude on Bedrock (`kind = "bedrock"`), Bedrock embeddings, and SigV4 signing with
the AWS credentials."""
