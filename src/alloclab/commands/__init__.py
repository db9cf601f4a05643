"""One module per CLI verb; each is thin and calls the library modules."""
