"""Several taskplane nodes on one shared store: node identity, leases, the shared
wake queue and cross-node live updates (design rules "One writer per Task", "Turn
authority is a lease")."""
