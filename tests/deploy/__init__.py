"""Deployment tests: the Helm chart, the Dockerfile install, the vLLM model layout."""
