"""Read-side aggregates for the dashboard, and the weekly regression report."""
