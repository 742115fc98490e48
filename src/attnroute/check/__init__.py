"""check/: the audit battery that judges any attention function against attnroute's reference."""
