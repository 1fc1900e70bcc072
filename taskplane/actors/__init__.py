"""taskplane.actors."""
