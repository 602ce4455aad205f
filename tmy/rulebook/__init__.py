"""Rules as loaded: YAML compiled once into rules, triggers, the trigger index and variables."""
