"""The Unix-socket server and the method table."""
