"""User feedback joined to the generation it rates."""
