"""The processes a run starts, kept in hand: nothing outlives alloclab (reaper, and the watchdog
process that acts when alloclab is killed), bounded logs (logcap), servers beside a run in their
own process (companion), and the replicas' CPU priority below alloclab's own (priority)."""
