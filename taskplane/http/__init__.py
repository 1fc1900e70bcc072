"""taskplane.http."""
