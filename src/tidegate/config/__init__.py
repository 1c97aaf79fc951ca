"""tidegate.toml: the tables (`model`), reading and checking a file (`load`), msgspec's errors worded
with the key's path (`values`), the upstream checks (`upstream`), where a key sits in the text
(`where`) and the generated reference and JSON schema (`reference`)."""
