"""What serves a run over HTTP while it goes on: the one guarded server (httpguard), the live view
(liveview), the Prometheus exposition (metrics), and the companion process that runs them (companion)."""
