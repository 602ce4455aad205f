"""Backup, restore and migration of everything tmy keeps (filled in by the backup work)."""
