"""What each command does, as a function from a request to a result; the CLI only parses and renders."""
