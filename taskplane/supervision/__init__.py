"""taskplane.supervision."""
