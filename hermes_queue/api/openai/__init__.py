"""The OpenAI dialects: chat completions and Responses, each as handlers, bodies, renderers,
stored response records and route rows."""
