"""One writer per raw format, each printing exactly what the real tool prints."""
