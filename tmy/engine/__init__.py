"""The engine: a Message in, a Reply out — matching, gates, the run of a rule's chain, replies."""
