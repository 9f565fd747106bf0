"""Adapters that route other libraries' attention through gllmd (transformers)."""
