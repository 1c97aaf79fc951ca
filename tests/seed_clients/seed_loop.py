"""The Python `requests` stream loop of the seed document `003` ("Parsing the stream"), verbatim.

Changed, and only this: the base URL, the API key and the model come from the command line / the
environment (`python seed_loop.py <base_url ending in /v1> <model>`, key in `TIDEGATE_API_KEY`), so
tests can point it at a real tidegate. The seed's loop raises `RuntimeError` on a failure before the
stream, on a failure chunk and on an end without `[DONE]`; an uncaught exception exits non-zero, so
the exit status is 0 exactly when the loop judged the answer complete.
"""

import json
import os
import sys

import requests

base_url, model = sys.argv[1], sys.argv[2]
api_key = os.environ["TIDEGATE_API_KEY"]

with requests.post(
    f"{base_url}/chat/completions",
    headers={"Authorization": f"Bearer {api_key}"},
    json={
        "model": model,
        "messages": [{"role": "user", "content": "Hallo!"}],
        "stream": True,
    },
    stream=True,
) as r:
    # Failures BEFORE the first byte are plain JSON with a real status code.
    if r.status_code != 200:
        err = r.json()["error"]
        raise RuntimeError(f"{err['code']}: {err['message']}")
    print("generation:", r.headers.get("X-Generation-Id"))

    complete = False
    for line in r.iter_lines(decode_unicode=True):
        if not line or line.startswith(":"):  # blank or keep-alive
            continue
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            complete = True
            break
        chunk = json.loads(payload)

        # Failures AFTER the first byte arrive here; the status was already 200.
        if "error" in chunk:
            raise RuntimeError(f"{chunk['error']['code']}: {chunk['error']['message']} (partial answer)")
        if chunk.get("usage"):
            print("\nusage:", chunk["usage"])

        delta = (chunk.get("choices") or [{}])[0].get("delta", {})
        if delta.get("reasoning"):
            print(delta["reasoning"], end="", flush=True)  # thinking
        if delta.get("content"):
            print(delta["content"], end="", flush=True)  # answer

    # EOF is not success: without [DONE] the answer is truncated.
    if not complete:
        raise RuntimeError("stream ended without [DONE]: answer is incomplete")
