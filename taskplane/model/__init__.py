"""taskplane.model."""
