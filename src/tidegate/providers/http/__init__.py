"""How every HTTP provider reaches its upstream: the client, its connections, proxies and TLS, and the
provider that runs an adapter over them."""
