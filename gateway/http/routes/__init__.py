"""HTTP routes: one module per endpoint group, each handler a few lines."""
