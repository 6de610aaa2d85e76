"""Tools from outside: Model Context Protocol servers the operator connects (docs/tools.md)."""
