"""Chat platforms: each turns its events into Messages and sends Replies back (tmy.types.Adapter)."""
