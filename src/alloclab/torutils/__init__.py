"""Import and export in the layout of the 1AEO TorUtils memory experiments.

Export writes memory.csv (co-unified layout: a `group` column after `nickname`, one `relay` row
per replica sample and one `aggregate` row per sampling time, then the columns alloclab measures
beyond it), events.csv, diagnostics.csv and experiment.json (TorUtils' group labels, plus an
`alloclab` section with what the analysis reads: metadata, groups, replicas and their
verification). Import reads that layout, including the 5-way variant whose groups live in
groups/group_<L>_<allocator>[_historical].txt lists, into a run store, so analysis and reports
work on operators' existing data and an export imports back to the same analysis. Import reads
and checks every file before it creates anything (docs/reference/store.md lists the rules).

Parts: layout (file and column names), validation (checks of hostile files), export,
importer, fastcsv (the columnar fast path of the memory CSV)."""
