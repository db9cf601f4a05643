"""What every layer shares and none owns: the one user-facing error (errors), exit codes (exitcodes),
environment settings (settings), times (timefmt), signal names (signalname) and output
directories (outputs)."""
