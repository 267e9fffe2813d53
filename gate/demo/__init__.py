"""`specgate demo`: the whole loop on a laptop, with real engines and a real verdict."""
