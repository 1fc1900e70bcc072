"""taskplane.bridge."""
