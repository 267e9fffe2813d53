"""Span pipeline, OTLP receiver and engine metrics scraping."""
