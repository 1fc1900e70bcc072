"""taskplane.store."""
