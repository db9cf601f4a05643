"""What serves a run over HTTP while it goes on: the one guarded server (httpguard), the live view
(liveview) and the Prometheus exposition (metrics), each in a companion process (process.companion)."""
