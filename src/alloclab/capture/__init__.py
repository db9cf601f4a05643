"""What a run sees of its processes: memory and CPU of whole process trees from /proc and cgroups
(sampler), one tick written to the store (recorder), the allocator's own account (introspect) and
the host's facts (host)."""
