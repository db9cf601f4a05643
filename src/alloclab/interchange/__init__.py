"""Ways into and out of a run's store besides a run: a Prometheus range (prometheus_import),
several stores as one run (merge), and a reproducible bundle (bundle). TorUtils CSV is its
own package, alloclab.torutils."""
