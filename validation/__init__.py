"""validation package."""
