"""Daemon scenarios: real `serve` processes, several adapters, the whole lifespan."""
