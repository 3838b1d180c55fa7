"""Compatibility shims for tools used alongside the backend (feature-detected, never by version)."""
