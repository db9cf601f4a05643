"""One experiment run: the checks before anything is created (preflight), the runner that starts every
replica and samples it to the end, the built-in workloads and scenarios, when a run may stop early
(stopping), and allocation traces recorded once and replayed under any allocator (trace)."""
