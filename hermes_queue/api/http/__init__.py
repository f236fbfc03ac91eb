"""HTTP building blocks with no app state: JSON bodies and their checks, typed request fields,
message content, query fields and SSE framing. Handlers pass in what these need (a timeout,
the API key), so a module here can be read, tested and imported without the process's
Redis, hub or store."""
