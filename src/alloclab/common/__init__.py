"""What every layer shares and none owns: the one user-facing error (errors), exit codes (exitcodes),
environment settings (settings), times (timefmt), signal names (signalname), output directories
(outputs), files under a root reached without following links (rootfs) and one-line text (text)."""
