"""Anthropic's wire: the Messages API's events and objects, beside ``gateway.openai`` (one layer:
both encode the core's results for the HTTP edge, and neither imports the other)."""
