"""What operators and clients ask of the server itself rather than of an agent: health,
readiness, capabilities and models, the workers' skills and toolsets, metrics and the queue,
the dashboard, and the upstream endpoints answered 501."""
